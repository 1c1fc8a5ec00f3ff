"""What surrounds a job's shard tasks and keeps the user's data safe.

- `fingerprint`: what identifies a job (its source and everything that shapes its output), so
  that resume continues only the same job;
- `destination`: which destinations a job may write (empty, or a dataset of ours; never the
  source, a folder around it, or the user's other files);
- `lease`: one job per destination, taken exclusively, renewed, released, taken over only
  from a job that stopped; `fencing`: a job writes data only while its lease names it;
- `runs`: a job's run, its control prefix, and `FencedStore`, the wrapper through which a run
  writes any store (each data write fenced and conditional; the stores know nothing of jobs);
- `journal`: what a job has proven it wrote (a receipt per shard, the job record), which
  objects an older dataset owned, and their removal once a new dataset replaces it.
"""
