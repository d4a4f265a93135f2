"""Runs on disk: atomic parquet shards, the manifest, resume by id, materialised versions."""

from fabrika.store.run import RunStore
from fabrika.store.shards import atomic_write_json, iter_frame_rows, write_shard

__all__ = ["RunStore", "atomic_write_json", "iter_frame_rows", "write_shard"]
