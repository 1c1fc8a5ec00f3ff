"""Running a conversion's job, once it is planned and checked: what the front ends call
(`pending`), the stream of its shard tasks (`shard_stream`), the bounded window that feeds them
to a cluster and folds their receipts (`submission`), each dataset's first and last steps
(`coordinator`), where the tasks run (`cluster`, `runners`, `workers`) and what the job shows
while it runs (`progress`). Dask's clients and clusters are driven from here only, through
their public API."""
