"""The application file ``spark-submit`` runs for the scheduled scan (see ``tieredctl-scan-submit``).

spark-submit takes a file, not a module: this one only hands over to the entry point of
``python -m remote_storage.scan``, imported from the zip the wrapper passes with ``--py-files``. Its exit status is
the scan's: 0 done, 1 error, 2 usage error, 3 anomalies over the alert threshold.
"""

import sys

from remote_storage.scan.__main__ import main

if __name__ == "__main__":
    sys.exit(main())
