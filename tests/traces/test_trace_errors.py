"""Bad input: every error names file, row, field and reason; strict raises, default drops and reports."""

import gzip
import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from servesim.cli.main import app
from servesim.traces import TraceError, load_trace
from servesim.traces.frame import check_frame

runner = CliRunner()
HEADER = "req_id,arrival_time_s,prompt_len,output_len\n"


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


# One bad row per case: (CSV data row, field named in the error, reason fragment).
BAD_ROWS = [
    ("r2,0.2,-5,3", "prompt_len", "negative token count (-5)"),
    ("r2,0.2,5,-3", "output_len", "negative token count (-3)"),
    ("r2,0.2,1.5,3", "prompt_len", "non-integer token count (1.5)"),
    ("r2,0.2,abc,3", "prompt_len", "not a number ('abc')"),
    ("r2,0.2,NaN,3", "prompt_len", "missing value"),
    ("r2,0.2,,3", "prompt_len", "missing value"),
    ("r2,NaN,5,3", "arrival_time_s", "missing value"),
    ("r2,-1.0,5,3", "arrival_time_s", "negative arrival time (-1.0)"),
    ("r2,inf,5,3", "arrival_time_s", "not a finite number (inf)"),
    ("r2,yesterday,5,3", "arrival_time_s", "not a number ('yesterday')"),
    ("r2,0.2,0,3", "prompt_len", "token count must be at least 1 (got 0)"),
    ("r1,0.2,5,3", "req_id", "duplicate req_id 'r1' (first at row 1)"),
    (",0.2,5,3", "req_id", "missing value"),
]


@pytest.mark.parametrize(("line", "field", "reason"), BAD_ROWS)
def test_bad_row_strict_raises_with_location(tmp_path: Path, line: str, field: str, reason: str) -> None:
    path = write(tmp_path, "trace.csv", HEADER + "r1,0.1,5,3\n" + line + "\nr3,0.3,5,3\n")
    with pytest.raises(TraceError) as info:
        load_trace(path, strict=True)
    err = info.value
    assert (err.file, err.row, err.field) == (str(path), 2, field)
    assert reason in err.reason
    assert str(err) == f"{path}: row 2: field '{field}': {err.reason}"


@pytest.mark.parametrize(("line", "field", "reason"), BAD_ROWS)
def test_bad_row_default_drops_and_reports(tmp_path: Path, line: str, field: str, reason: str) -> None:
    path = write(tmp_path, "trace.csv", HEADER + "r1,0.1,5,3\n" + line + "\nr3,0.3,5,3\n")
    trace = load_trace(path)
    check_frame(trace.df)
    assert trace.df["req_id"].tolist() == ["r1", "r3"]
    prov = trace.provenance
    assert (prov.rows_read, prov.rows_kept, prov.num_dropped) == (3, 2, 1)
    (drop,) = prov.dropped
    assert (drop.row, drop.field) == (2, field) and reason in drop.reason
    assert any("dropped 1 bad row" in n for n in prov.notes)


def test_message_format_matches_the_documented_example(tmp_path: Path) -> None:
    rows = "".join(f"r{i},{i / 10},5,3\n" for i in range(1, 17))
    path = write(tmp_path, "trace.csv", HEADER + rows + "r17,1.7,-5,3\n")
    with pytest.raises(TraceError) as info:
        load_trace(path, strict=True)
    assert str(info.value) == f"{path}: row 17: field 'prompt_len': negative token count (-5)"


def test_every_bad_row_is_counted_and_strict_stops_at_the_first(tmp_path: Path) -> None:
    lines = [f"r{i},{i},5,3" if i % 3 else f"r{i},{i},-1,3" for i in range(1, 31)]
    path = write(tmp_path, "trace.csv", HEADER + "\n".join(lines) + "\n")
    trace = load_trace(path, chunk_rows=4)
    assert trace.provenance.num_dropped == 10
    assert [d.row for d in trace.provenance.dropped] == list(range(3, 31, 3))
    with pytest.raises(TraceError, match="row 3: "):
        load_trace(path, strict=True, chunk_rows=4)


def test_duplicate_across_chunks_and_strict_order(tmp_path: Path) -> None:
    # Row 5 repeats row 1's id (another chunk); row 7 is bad: strict reports row 5 first.
    lines = ["a,1,5,3", "b,2,5,3", "c,3,5,3", "d,4,5,3", "a,5,5,3", "e,6,5,3", "f,7,-5,3"]
    path = write(tmp_path, "trace.csv", HEADER + "\n".join(lines) + "\n")
    with pytest.raises(TraceError) as info:
        load_trace(path, strict=True, chunk_rows=2)
    assert (info.value.row, info.value.field) == (5, "req_id")
    trace = load_trace(path, chunk_rows=2)
    assert trace.df["req_id"].tolist() == ["a", "b", "c", "d", "e"]
    assert [(d.row, d.field) for d in trace.provenance.dropped] == [(5, "req_id"), (7, "prompt_len")]


def test_missing_columns_list_the_expected_ones(tmp_path: Path) -> None:
    path = write(tmp_path, "trace.csv", "req_id,arrival_time_s,prompt_len\nr1,0,5\n")
    with pytest.raises(TraceError) as info:
        load_trace(path)
    msg = str(info.value)
    assert info.value.field == "output_len"
    assert "missing column(s) 'output_len'" in msg
    for col in ("req_id", "arrival_time_s", "prompt_len", "output_len", "hash_ids"):
        assert col in msg


def test_missing_columns_of_an_asked_format(tmp_path: Path) -> None:
    path = write(tmp_path, "az.csv", "TIMESTAMP,ContextTokens\n2023-11-16 18:17:03.9799600,5\n")
    with pytest.raises(TraceError, match="'GeneratedTokens'; the azure format needs: TIMESTAMP"):
        load_trace(path)
    with pytest.raises(TraceError, match="the burstgpt format needs: Timestamp"):
        load_trace(path, format="burstgpt")


def test_unrecognised_columns(tmp_path: Path) -> None:
    path = write(tmp_path, "x.csv", "foo,bar\n1,2\n")
    with pytest.raises(TraceError, match=r"unrecognised columns \('foo', 'bar'\); expected one of"):
        load_trace(path)


def test_missing_req_id_column_is_filled_with_row_numbers(tmp_path: Path) -> None:
    path = write(tmp_path, "t.csv", "arrival_time_s,prompt_len,output_len\n0.5,5,3\n0.1,6,3\n")
    trace = load_trace(path)
    assert trace.df["req_id"].tolist() == ["2", "1"]  # sorted by arrival; ids are file rows
    assert any("no req_id column" in n for n in trace.provenance.notes)


def test_azure_unparsable_timestamp(tmp_path: Path) -> None:
    text = "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.9799600,5,3\nyesterday,5,3\n"
    path = write(tmp_path, "az.csv", text)
    with pytest.raises(TraceError) as info:
        load_trace(path, strict=True)
    assert (info.value.row, info.value.field) == (2, "TIMESTAMP")
    assert "unparsable timestamp ('yesterday')" in str(info.value)
    assert load_trace(path).provenance.num_dropped == 1


def test_azure_unsorted_rows_are_sorted_and_relative_to_the_earliest(tmp_path: Path) -> None:
    text = (
        "TIMESTAMP,ContextTokens,GeneratedTokens\n"
        "2023-11-16 18:17:03.9799600,5,3\n"
        "2023-11-16 18:17:01.5000000,6,3\n"
        "2023-11-16 18:17:04.0000000,7,3\n"
    )
    trace = load_trace(write(tmp_path, "az.csv", text))
    assert trace.provenance.reordered
    assert trace.df["req_id"].tolist() == ["2", "1", "3"]
    assert trace.df["arrival_time_s"].tolist() == pytest.approx([0.0, 2.47996, 2.5])
    assert any("sorted by arrival" in n for n in trace.provenance.notes)


def test_unsorted_native_is_sorted_stably(tmp_path: Path) -> None:
    path = write(tmp_path, "t.csv", HEADER + "a,2,5,3\nb,1,5,3\nc,2,5,3\nd,1,5,3\n")
    trace = load_trace(path)
    assert trace.df["req_id"].tolist() == ["b", "d", "a", "c"]
    assert trace.provenance.reordered
    assert not load_trace(write(tmp_path, "s.csv", HEADER + "a,1,5,3\nb,1,5,3\n")).provenance.reordered


@pytest.mark.parametrize(
    ("name", "data", "row", "field"),
    [
        ("t.csv", HEADER.encode() + b"r1,0,5,3\nr\xff2,0,5,3\n", 2, "req_id"),
        ("t.csv", HEADER.encode() + b"r1,0,5,3\nr2,0,5\xe9,3\n", 2, "prompt_len"),
        (
            "t.jsonl",
            b'{"req_id": "a", "arrival_time_s": 0, "prompt_len": 5, "output_len": 3}\n'
            b'{"req_id": "b\xff", "arrival_time_s": 0, "prompt_len": 5, "output_len": 3}\n',
            2,
            "req_id",
        ),
        (
            "t.json",
            b'[{"req_id": "a\xff", "arrival_time_s": 0, "prompt_len": 5, "output_len": 3}]',
            None,
            "req_id",
        ),
    ],
)
def test_non_utf8_names_row_and_field(
    tmp_path: Path, name: str, data: bytes, row: int | None, field: str
) -> None:
    path = tmp_path / name
    path.write_bytes(data)
    for strict in (False, True):  # the encoding is wrong for the whole file: fatal in both modes
        with pytest.raises(TraceError) as info:
            load_trace(path, strict=strict)
        assert (info.value.row, info.value.field) == (row, field)
        assert "not valid UTF-8" in info.value.reason


@pytest.mark.parametrize("name", ["t.csv", "t.jsonl", "t.json", "t.parquet", "t.csv.gz", "noext"])
def test_empty_file(tmp_path: Path, name: str) -> None:
    path = tmp_path / name
    path.write_bytes(gzip.compress(b"") if name.endswith(".gz") else b"")
    with pytest.raises(TraceError, match="empty file"):
        load_trace(path)


@pytest.mark.parametrize(
    ("name", "text", "fmt"),
    [
        ("h.csv", HEADER, "native-csv"),
        ("e.json", "[]", "native-json"),
        ("o.json", '{"hash_block_size": null, "requests": []}', "native-json"),
        ("e.jsonl", "\n\n", "native-jsonl"),
        ("s.json", '{"arrival_distribution": "burst_empty", "requests": []}', "seed-json"),
        ("az.csv", "TIMESTAMP,ContextTokens,GeneratedTokens\n", "azure"),
    ],
)
def test_valid_empty_traces(tmp_path: Path, name: str, text: str, fmt: str) -> None:
    trace = load_trace(write(tmp_path, name, text))
    assert len(trace) == 0 and trace.provenance.format == fmt and trace.provenance.num_dropped == 0
    check_frame(trace.df)


def test_jsonl_bad_lines(tmp_path: Path) -> None:
    good = '{"req_id": "a", "arrival_time_s": 0, "prompt_len": 5, "output_len": 3}'
    text = (
        "\n".join(
            [
                good,
                "{not json",
                "[1, 2]",
                "",
                '{"req_id": "b", "arrival_time_s": 1, "prompt_len": true, "output_len": 3}',
                '{"req_id": "c", "arrival_time_s": 1, "prompt_len": 5}',
            ]
        )
        + "\n"
    )
    path = write(tmp_path, "t.jsonl", text)
    trace = load_trace(path)
    assert trace.df["req_id"].tolist() == ["a"]
    got = [(d.row, d.field, d.reason.split(" (")[0]) for d in trace.provenance.dropped]
    assert got == [
        (2, None, "invalid JSON"),
        (3, None, "not a JSON object"),
        (5, "prompt_len", "not a number"),
        (6, "output_len", "missing value"),
    ]
    with pytest.raises(TraceError, match=r"row 2: invalid JSON"):
        load_trace(path, strict=True)


def test_json_bad_document_and_rows(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="invalid JSON"):
        load_trace(write(tmp_path, "a.json", '[{"req_id": '))
    with pytest.raises(TraceError, match="'requests' list"):
        load_trace(write(tmp_path, "b.json", '{"rows": []}'))
    rows = [
        {"req_id": "a", "arrival_time_s": 0, "prompt_len": 5, "output_len": 3},
        7,
        {"req_id": "b", "arrival_time_s": 0, "prompt_len": 5.5, "output_len": 3},
    ]
    trace = load_trace(write(tmp_path, "c.json", json.dumps(rows)))
    assert [(d.row, d.field) for d in trace.provenance.dropped] == [(2, None), (3, "prompt_len")]


def test_parquet_bad_values_and_corrupt_file(tmp_path: Path) -> None:
    table = pa.table(
        {
            "req_id": ["a", "b", "a"],
            "arrival_time_s": [0.0, -1.0, 2.0],
            "prompt_len": [5, 5, 5],
            "output_len": [3, None, 3],
        }
    )
    pq.write_table(table, tmp_path / "t.parquet")
    trace = load_trace(tmp_path / "t.parquet")
    assert [(d.row, d.field) for d in trace.provenance.dropped] == [(2, "arrival_time_s"), (3, "req_id")]
    (tmp_path / "bad.parquet").write_bytes(b"PAR1 not really")
    with pytest.raises(TraceError, match="not a readable Parquet file"):
        load_trace(tmp_path / "bad.parquet")


def test_malformed_csv_line(tmp_path: Path) -> None:
    path = write(tmp_path, "t.csv", HEADER + "r1,0,5,3\nr2,0,5,3,99\n")
    with pytest.raises(TraceError) as info:
        load_trace(path)
    assert info.value.row == 2 and "malformed CSV" in info.value.reason


def test_hash_ids_need_a_block_size_in_csv(tmp_path: Path) -> None:
    path = write(
        tmp_path, "t.csv", 'req_id,arrival_time_s,prompt_len,output_len,hash_ids\nr1,0,20,3,"[1, 2]"\n'
    )
    with pytest.raises(TraceError, match="pass hash_block_size") as info:
        load_trace(path)
    assert (info.value.row, info.value.field) == (1, "hash_ids")
    assert load_trace(path, hash_block_size=16).df["hash_ids"].tolist() == [[1, 2]]


@pytest.mark.parametrize(
    ("cell", "reason"),
    [('"[1, ""x""]"', "hash id 'x' is not an integer"), ('"[1, 2"', "not a JSON list"), ("7", "not a list")],
)
def test_bad_hash_ids(tmp_path: Path, cell: str, reason: str) -> None:
    path = write(
        tmp_path, "t.csv", f"req_id,arrival_time_s,prompt_len,output_len,hash_ids\nr1,0,20,3,{cell}\n"
    )
    with pytest.raises(TraceError, match=reason):
        load_trace(path, hash_block_size=16, strict=True)


def test_prefix_rules(tmp_path: Path) -> None:
    text = (
        "req_id,arrival_time_s,prompt_len,output_len,prefix_group,prefix_len\n"
        "a,0,10,3,g,4\n"
        "b,0,10,3,g,11\n"
        "c,0,10,3,,4\n"
    )
    trace = load_trace(write(tmp_path, "t.csv", text))
    assert trace.df["req_id"].tolist() == ["a"]
    reasons = [d.reason for d in trace.provenance.dropped]
    assert reasons == [
        "prefix_len (11) exceeds prompt_len (10)",
        "prefix_len is set but prefix_group is empty",
    ]


def test_unknown_format_and_missing_file(tmp_path: Path) -> None:
    path = write(tmp_path, "t.csv", HEADER)
    with pytest.raises(TraceError, match="unknown format 'xml'"):
        load_trace(path, format="xml")
    with pytest.raises(TraceError, match="no such file"):
        load_trace(tmp_path / "missing.csv")


def test_seed_json_unknown_distribution(tmp_path: Path) -> None:
    path = write(tmp_path, "s.json", '{"arrival_distribution": "zipf_3", "requests": []}')
    with pytest.raises(TraceError, match="unknown arrival distribution 'zipf_3'") as info:
        load_trace(path)
    assert info.value.field == "arrival_distribution"


@pytest.mark.parametrize(
    "args",
    [
        ["trace", "inspect", "{bad}"],
        ["trace", "inspect", "{bad}", "--strict"],
        ["trace", "inspect", "{empty}"],
        ["trace", "inspect", "{bad}", "--format", "nope"],
        ["trace", "convert", "{bad}", "{out}", "--strict"],
        ["generate", "--lengths-from", "{empty}"],
    ],
)
def test_cli_errors_are_one_line_exit_2(tmp_path: Path, args: list[str]) -> None:
    bad = write(tmp_path, "bad.csv", HEADER + "r1,0,5,3\nr2,0,-5,3\nr3,0,5,3,9\n")
    empty = write(tmp_path, "empty.csv", "")
    args = [a.format(bad=bad, empty=empty, out=tmp_path / "o.csv") for a in args]
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert result.stdout == ""
    assert result.stderr.startswith("error: ") and result.stderr.count("\n") == 1
    assert "Traceback" not in result.output
    assert not (tmp_path / "o.csv").exists()


def test_cli_strict_error_names_file_row_field(tmp_path: Path) -> None:
    bad = write(tmp_path, "bad.csv", HEADER + "r1,0,5,3\nr2,0,-5,3\n")
    result = runner.invoke(app, ["trace", "inspect", str(bad), "--strict"])
    assert result.stderr == f"error: {bad}: row 2: field 'prompt_len': negative token count (-5)\n"


def test_dropped_list_is_capped_but_all_are_counted(tmp_path: Path) -> None:
    lines = [f"r{i},{i},{-1 if i % 2 else 5},3" for i in range(1, 3001)]
    path = write(tmp_path, "t.csv", HEADER + "\n".join(lines) + "\n")
    prov = load_trace(path, chunk_rows=500).provenance
    assert prov.num_dropped == 1500 and prov.rows_kept == 1500
    assert [d.row for d in prov.dropped] == list(range(1, 2001, 2))  # the first 1000, in file order
