"""The lag-history walk's input made in its tasks (`sharestate.analytics.lag_bins`): groups
dealt to bins by their rows, and a bin's rows read from history data files, as the walk
needs them: its groups' rows only, group by group in `INPUT_ORDER`, each group's saved walk
first, the same rows as the Spark path's."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from sharestate.analytics.lag_bins import WALK_BINS, bin_inputs, bins_for, deal, group_rows
from sharestate.analytics.lag_history import HISTORY_COLUMNS, HISTORY_FILES, read_history_files
from sharestate.tables.spec import table

WANTED = table("share_partition_state_history").arrow_schema()
GROUPS = ("a", "b", "ç-✓", "d")


def _files(tmp_path: Path, rng: random.Random) -> list[tuple[str, int]]:
    """History data files of three state partitions, two each, with nulls, tombstones and
    times stepping back; one file written before `delivery_complete_count` existed."""
    batch_type = WANTED.field("state_batches").type.value_type
    files = []
    for state_partition in range(3):
        offset = 0
        for part in range(2):
            rows = []
            for _ in range(rng.randrange(0, 300)):
                offset += rng.randrange(1, 3)
                spso = rng.choice([None, -1, rng.randrange(0, 50)])
                rows.append({
                    "group_id": rng.choice(GROUPS), "topic_id": rng.choice("TU"),
                    "partition": rng.randrange(2), "record_offset": offset,
                    "timestamp": rng.choice([None, *range(0, 200, 7)]),
                    "deleted": rng.random() < 0.05, "start_offset": spso,
                    "delivery_complete_count": rng.choice([None, -1, rng.randrange(9)]),
                    "state_batches": rng.choice([None, [
                        {f.name: rng.choice([None, *range(60)]) for f in batch_type}
                        for _ in range(rng.randrange(3))]])})
            columns = [c for c in HISTORY_COLUMNS if c != "state_partition"
                       and (c != "delivery_complete_count" or (state_partition, part) != (1, 0))]
            schema = pa.schema([WANTED.field(c) for c in columns])
            path = tmp_path / f"p{state_partition}-{part}.parquet"
            pq.write_table(pa.Table.from_pylist(rows, schema), path, row_group_size=50)
            files.append((str(path), state_partition))
    return files


def _read(files: list[tuple[str, int]], since: int | None) -> list[dict[str, Any]]:
    """The rows the Spark path's tasks read (`read_history_files`), in file order."""
    task = pa.RecordBatch.from_pylist([{"uris": [u for u, _ in files],
                                        "state_partitions": [p for _, p in files]}],
                                      HISTORY_FILES)
    return [r for batch in read_history_files(iter([task]), WANTED, since)
            for r in batch.to_pylist()]


def _spark_order(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return sorted(rows, key=lambda r: (r["group_id"], r["time"], r["state_partition"],
                                       r["record_offset"]))


@pytest.mark.parametrize("seed", range(6))
def test_a_bin_reads_its_groups_rows_in_the_walks_order_saved_walks_first(
        tmp_path: Path, seed: int) -> None:
    rng = random.Random(seed)
    files = _files(tmp_path, rng)
    since = rng.choice([None, 50])
    spark_rows = _read(files, since)
    groups = sorted(rng.sample(GROUPS, rng.randrange(1, 4)))
    resumes = [rng.choice([None, f'{{"group_id": "{g}"}}']) for g in groups]
    task = pa.RecordBatch.from_pylist([{
        "groups": groups, "resumes": resumes, "uris": [u for u, _ in files],
        "state_partitions": [p for _, p in files]}], WALK_BINS)
    got = [r for batch in bin_inputs(iter([task]), WANTED, since) for r in batch.to_pylist()]
    expected = []
    for group, resume in zip(groups, resumes, strict=True):
        if resume is not None:
            expected.append({**dict.fromkeys(spark_rows[0]), "group_id": group,
                             "resume": resume})
        expected += [{**r, "resume": None} for r in _spark_order(spark_rows)
                     if r["group_id"] == group]
    assert got == expected
    assert any(r["resume"] is None for r in got)


def test_groups_are_dealt_largest_first_onto_the_lightest_bin(tmp_path: Path) -> None:
    counts = {"a": 5, "b": 4, "c": 3, "d": 3, "e": 1, "saved": 0}
    assert deal(counts, 2, 100) == [["b", "c", "e"], ["a", "d", "saved"]]
    assert deal(counts, 2, 8) == [["b", "c", "e"], ["a", "d", "saved"]]
    assert deal(counts, 2, 7) is None  # a bin of 8 rows
    assert deal(counts, 1, 16) == [sorted(counts)]
    assert deal({"a": 1}, 4, 1) == [["a"]]
    assert deal({}, 2, 0) == []
    assert bins_for(counts, 2, 8) == deal(counts, 2, 8)  # a bin a core where they fit
    assert bins_for(counts, 1, 8) == deal(counts, 2, 8)  # else more bins, the fewest that do
    assert bins_for(counts, 1, 5) == [["a"], ["c", "e"], ["b"], ["d", "saved"]]
    assert bins_for(counts, 1, 4) is None  # a group of 5 rows
    assert bins_for({g: 4 for g in "abcdefghi"}, 2, 4) is None  # 9 bins: past 4 a core
    many = {f"g{i:02}": 1 for i in range(40)}
    assert len(bins_for(many, 12, 40) or []) == 12  # a bin a core, up to 12 cores
    assert len(bins_for(many, 4, 4) or []) == 10  # more bins than cores where needed
    assert bins_for(many, 4, 3) is None  # 14 bins, within 4 a core but past 12 in all
    assert bins_for(many, 13, 40) is None  # past 12 cores the shuffle is quicker
    assert bins_for({}, 2, 0) == []
    files = _files(tmp_path, random.Random(1))
    read = _read(files, None)
    counted = group_rows(u for u, _ in files)
    assert sum(counted.values()) >= len(read) > 0  # rows without a time are not walked
    assert set(counted) == {r["group_id"] for r in read}
