"""Runs on disk: atomic parquet shards, the manifest, resume by id, materialised versions."""

from fabrika.store.run import RunStore
from fabrika.store.shards import atomic_write_json, iter_frame_rows, write_shard
from fabrika.store.versions import VersionInfo, list_versions, materialise, read_version, refilter, scan_version

__all__ = [
    "RunStore",
    "VersionInfo",
    "atomic_write_json",
    "iter_frame_rows",
    "list_versions",
    "materialise",
    "read_version",
    "refilter",
    "scan_version",
    "write_shard",
]
