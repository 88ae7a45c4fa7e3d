"""The inventory scan: classify every object of a bucket against the metadata, find reclaimable bytes and anomalies.

Modules: :mod:`.contract` (category and anomaly names, the size rule, output files and columns: what every consumer
relies on), :mod:`.sources` (the inventory as the executors read it), :mod:`.session` (the local SparkSession),
:mod:`.job` (the Spark DataFrame job) and its steps :mod:`.locate` (which segment a key belongs to: the layout, or
the location a segment records), :mod:`.classify` (each object's verdict) and :mod:`.segment_checks` (segment
anomalies, sizes and the manifest reads they need: :mod:`.manifest_fetch` on the executors, :mod:`.manifest_reading`
for what a manifest says), :mod:`.summary` (summary.json and the alert threshold), :mod:`.report` (the HTML report),
:mod:`.run` (one scan end to end). The pure reference classifier the job is checked against lives in
:mod:`policies.orphans`.
"""
