import json

import pytest
from documents import RECORDS

TEXT = json.dumps(RECORDS)


@pytest.mark.benchmark(group="encode")
def test_encode(benchmark):
    benchmark.extra_info["compact"] = True
    out = benchmark(json.dumps, RECORDS, separators=(",", ":"))
    assert json.loads(out) == RECORDS


@pytest.mark.benchmark(group="decode")
def test_decode(benchmark):
    benchmark.extra_info["compact"] = False
    assert benchmark(json.loads, TEXT) == RECORDS
