"""The log store's promises, against each store (files, and an S3 bucket on a local
moto server): reads and resumes by offset, the last-lines view, the cut at
LOG_MAX_BYTES, a native attempt's writer, cleanup; and what is particular to S3: two
replicas' stores on one bucket, a chunk per append, a tail that reads only the end, an
unreachable bucket, a clean exit."""

from __future__ import annotations

import asyncio
import subprocess
import sys

import obstore
import pytest
from pydantic import ValidationError

from engine import log_store
from engine.log_s3 import S3LogStore, chunk_name
from engine.log_settings import LogSettings
from engine.log_store import CUT_MARKER, LogLine, LogStore, encode
from tests.conftest import ROOT
from tests.log_stores import S3_ENV, S3Server
from tests.ports import free_port
from workflows.errors import LogStoreUnavailable


def lines_of(*texts: str, stream: str = "stdout") -> list[LogLine]:
    return [LogLine.model_validate({"stream": stream, "text": text}) for text in texts]


async def test_lines_read_from_any_line_end_resume_where_the_last_read_stopped(
    any_log_store: LogStore,
) -> None:
    store = any_log_store
    assert await store.read("j1", 1) == ([], 0)
    first = lines_of("one", "two", "héllo ✓")
    end = await store.append_at("j1", 1, 0, first)
    found = await store.read_ends("j1", 1)
    assert [line for line, _ in found] == first
    assert found[-1][1] == end == await store.size("j1", 1)
    more = lines_of("four", stream="stderr")
    after = await store.append_at("j1", 1, end, more)
    # A follower that had read up to `end` gets only what came since.
    assert await store.read("j1", 1, end) == (more, after)
    assert await store.read("j1", 1, found[0][1]) == ([*first[1:], *more], after)
    assert await store.read("j1", 1, after) == ([], after)


async def test_the_last_lines_view_gives_the_last_n_lines_and_where_they_start(
    any_log_store: LogStore,
) -> None:
    store = any_log_store
    assert await store.tail("j1", 1, 5) == (0, [])
    # Many chunks, and more than one read-back step of bytes.
    everything = lines_of(*(f"line {i} " + "y" * 200 for i in range(1500)))
    end = 0
    for i in range(0, len(everything), 100):
        end = await store.append_at("j1", 1, end, everything[i : i + 100])
    start, found = await store.tail("j1", 1, 700)
    assert [line for line, _ in found] == everything[-700:]
    assert start == len(encode(everything[:-700]))
    assert found[-1][1] == end
    start, found = await store.tail("j1", 1, 5000)  # more than there are
    assert (start, [line for line, _ in found]) == (0, everything)


async def test_a_log_past_its_bound_ends_with_the_cut_marker_and_takes_no_more(
    any_log_store: LogStore,
) -> None:
    store = any_log_store
    chunk = lines_of("x" * 100)
    size = len(encode(chunk))
    end = 0
    for _ in range(3):
        end = await store.append_at("j1", 1, end, chunk, max_bytes=2 * size)
    marker = CUT_MARKER.format(size=2 * size)
    stored, after = await store.read("j1", 1)
    assert stored == [*chunk, *chunk, LogLine(stream="jobforge", text=marker)]
    assert after == end
    assert await store.append_at("j1", 1, end, chunk, max_bytes=2 * size) == end
    assert await store.size("j1", 1) == end


async def test_a_native_attempts_writer_keeps_its_lines_per_stream_and_its_bound(
    any_log_store: LogStore,
) -> None:
    store = any_log_store
    writer = store.writer("j1", 2)
    writer.write("stdout", b"out 1\nout")
    writer.write("stderr", b"err 1\n")
    writer.write("stdout", b" 2\n\xff bad byte\n")
    writer.write("stderr", b"no newline")
    await writer.close()
    stored, _ = await store.read("j1", 2)
    assert [(line.stream, line.text) for line in stored] == [
        ("stdout", "out 1"),
        ("stderr", "err 1"),
        ("stdout", "out 2"),
        ("stdout", "\ufffd bad byte"),
        ("stderr", "no newline"),
    ]
    assert await store.attempts("j1") == [2]

    bounded = open_store_like(store, LOG_MAX_BYTES="1024")
    cut = bounded.writer("j2", 1)
    for i in range(100):
        cut.write("stdout", f"line {i}\n".encode())
    await cut.close()
    kept, _ = await bounded.read("j2", 1)
    assert kept[-1] == LogLine(stream="jobforge", text=CUT_MARKER.format(size=1024))
    assert len(encode(kept[:-1])) <= 1024


def open_store_like(store: LogStore, **settings: str) -> LogStore:
    """Another store on the same files or bucket, with other settings."""
    if isinstance(store, S3LogStore):
        location = store.location
        url = f"s3://{location.bucket}/{location.prefix}?endpoint={location.endpoint}"
        return LogSettings(LOG_STORE_URL=url, **S3_ENV, **settings).open()
    assert isinstance(store, log_store.FileLogStore)
    return LogSettings(LOG_DIR=store.root, **settings).open()


async def test_cleanup_removes_every_attempt_of_a_job_and_no_other(
    any_log_store: LogStore,
) -> None:
    store = any_log_store
    for job_id, attempt in (("j1", 1), ("j1", 2), ("j1", 10), ("j2", 1)):
        await store.append_at(job_id, attempt, 0, lines_of(f"{job_id} {attempt}"))
    assert await store.attempts("j1") == [1, 2, 10]
    await store.remove("j1")
    assert await store.attempts("j1") == []
    assert await store.read("j1", 1) == ([], 0)
    assert await store.size("j1", 2) == 0
    assert (await store.read("j2", 1))[0] == lines_of("j2 1")


async def test_a_job_id_that_is_no_path_segment_is_refused(any_log_store: LogStore) -> None:
    with pytest.raises(ValueError, match="no log"):
        await any_log_store.append_at("../j1", 1, 0, lines_of("x"))
    with pytest.raises(ValueError, match="no log"):
        await any_log_store.read("j1", 0)
    assert await any_log_store.attempts("a/b") == []


# -- S3 --------------------------------------------------------------------------------


async def test_two_replicas_stores_on_one_bucket_see_and_extend_each_others_log(
    s3_server: S3Server,
) -> None:
    bucket = s3_server.bucket()
    url = s3_server.store_url(bucket)
    first, second = (LogSettings(LOG_STORE_URL=url, **S3_ENV).open() for _ in range(2))
    end = await first.append_at("j1", 1, 0, lines_of("from the first"))
    assert (await second.read("j1", 1))[0] == lines_of("from the first")
    after = await second.append_at("j1", 1, end, lines_of("from the second"))
    # The first knew the chain up to `end` only: it learns the rest from one listing.
    assert await first.read("j1", 1, end) == (lines_of("from the second"), after)
    # Its stale view does not let it store at an offset the second filled.
    with pytest.raises(log_store.UploadConflictError) as refused:
        await first.append_at("j1", 1, end, lines_of("not what is stored"))
    assert refused.value.expected_offset == after
    assert s3_server.keys(bucket) == [
        f"jobforge/logs/j1/1/{0:020d}",
        f"jobforge/logs/j1/1/{end:020d}",
    ]


async def test_a_native_writer_stores_a_chunk_per_flush_not_per_line(
    s3_server: S3Server,
) -> None:
    bucket = s3_server.bucket()
    url = s3_server.store_url(bucket)
    store = LogSettings(LOG_STORE_URL=url, **S3_ENV).open()
    writer = store.writer("j1", 1)
    for i in range(200):
        writer.write("stdout", f"line {i}\n".encode())
    await writer.close()
    assert (await store.read("j1", 1))[0] == lines_of(*(f"line {i}" for i in range(200)))
    assert s3_server.keys(bucket) == [f"jobforge/logs/j1/1/{0:020d}"]


async def test_the_last_lines_view_reads_only_the_end_of_the_log(s3_server: S3Server) -> None:
    bucket = s3_server.bucket()
    store = open_store_on(s3_server, bucket)
    end = 0
    for i in range(30):
        end = await store.append_at("j1", 1, end, lines_of(f"chunk {i}"))
    # Its first chunks gone from the bucket: a view of the last lines does not notice.
    reader = open_store_on(s3_server, bucket)
    await reader.size("j1", 1)  # the chain, listed while all of it was there
    assert isinstance(reader, S3LogStore)
    names = [chunk_name("j1", 1, offset) for offset, _ in (await reader._chunks("j1", 1)).chunks]
    obstore.delete(reader.location.store(), names[:10])
    assert len(s3_server.keys(bucket)) == 20
    _, found = await reader.tail("j1", 1, 3)
    assert [line.text for line, _ in found] == ["chunk 27", "chunk 28", "chunk 29"]
    # A read from the start does notice.
    assert (await reader.read("j1", 1))[0] == []


def open_store_on(s3_server: S3Server, bucket: str) -> LogStore:
    return LogSettings(LOG_STORE_URL=s3_server.store_url(bucket), **S3_ENV).open()


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("http://minio:9000/logs", "s3://bucket"),
        ("s3:///prefix", "s3://bucket"),
        ("s3://logs/p?endpoint=minio:9000", "http:// or https://"),
        ("s3://logs/p?secret=1", "unknown parameter"),
    ],
)
def test_a_log_store_url_that_names_no_bucket_is_refused_naming_the_variable(
    url: str, message: str
) -> None:
    with pytest.raises(ValidationError) as refused:
        LogSettings(LOG_STORE_URL=url)
    assert "LOG_STORE_URL" in str(refused.value)
    assert message in str(refused.value)


def test_the_url_names_bucket_prefix_and_endpoint_and_the_aws_variables_the_rest(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("LOG_STORE_URL", "s3://jobforge-logs/prod/logs?endpoint=http://minio:9000")
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "key")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "secret")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    location = LogSettings().s3_location()
    assert location is not None
    assert (location.bucket, location.prefix, location.endpoint) == (
        "jobforge-logs",
        "prod/logs",
        "http://minio:9000",
    )
    assert (location.access_key_id, location.secret_access_key) == ("key", "secret")
    assert location.region == "eu-west-1"
    monkeypatch.delenv("LOG_STORE_URL")
    assert LogSettings().s3_location() is None
    assert isinstance(LogSettings().open(), log_store.FileLogStore)


def test_an_unreachable_bucket_is_unavailable_within_seconds() -> None:
    """No server at the endpoint: every access raises LogStoreUnavailable (a 503 to
    the API's caller) at once, not after minutes of the client's retries."""
    url = f"s3://logs/p?endpoint=http://127.0.0.1:{free_port()}"
    store = LogSettings(LOG_STORE_URL=url, **S3_ENV).open()

    async def each() -> None:
        for access in (
            store.read("j1", 1),
            store.append_at("j1", 1, 0, lines_of("x")),
            store.attempts("j1"),
            store.remove("j1"),
        ):
            with pytest.raises(LogStoreUnavailable, match="log store is unavailable"):
                await asyncio.wait_for(access, 30)

    asyncio.run(each())


PROCESS = """
import asyncio, sys
from engine.log_settings import LogSettings
from engine.log_store import LogLine

async def main():
    store = LogSettings(LOG_STORE_URL=sys.argv[1], **{env!r}).open()
    job = sys.argv[2]
    end = await store.append_at(job, 1, 0, [LogLine(stream="stdout", text="x")])
    assert (await store.read(job, 1))[1] == end
    await store.tail(job, 1, 1)
    writer = store.writer(job, 2)
    writer.write("stdout", b"y\\n")
    await writer.close()
    assert await store.attempts(job) == [1, 2]
    await store.remove(job)

asyncio.run(main())
"""


def test_a_process_that_used_the_s3_store_exits_cleanly(s3_server: S3Server) -> None:
    """With the client's own coroutines, some processes aborted at interpreter exit
    (SIGABRT from its runtime's threads); twelve processes all exit 0."""
    url = s3_server.store_url(s3_server.bucket())
    code = PROCESS.format(env=S3_ENV)
    # One after another: at once, the processes' exits happen to go well more often.
    results = [
        subprocess.run(
            [sys.executable, "-c", code, url, f"job-{i}"],
            cwd=ROOT,
            capture_output=True,
            timeout=120,
            check=False,
        )
        for i in range(12)
    ]
    assert [run.returncode for run in results] == [0] * 12, [run.stderr[-500:] for run in results]
