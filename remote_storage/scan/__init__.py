"""The inventory scan: classify every object of a bucket against the metadata, find reclaimable bytes and anomalies.

Modules: :mod:`.contract` (category and anomaly names, output files and columns: what every consumer relies on),
:mod:`.sources` (the inventory as the executors read it), :mod:`.session` (the local SparkSession), :mod:`.job`
(the Spark DataFrame job), :mod:`.summary` (summary.json and the alert threshold), :mod:`.report` (the HTML report).
The pure reference classifier the job is checked against lives in :mod:`policies.orphans`.
"""
