"""``make bench``: each figure is printed beside a reference measured in the same run, as a ratio."""
