import pickle

import pytest
from documents import RECORDS

DATA = pickle.dumps(RECORDS, protocol=pickle.HIGHEST_PROTOCOL)


@pytest.mark.benchmark(group="encode")
def test_encode(benchmark):
    benchmark.extra_info["compact"] = True
    out = benchmark(pickle.dumps, RECORDS, protocol=pickle.HIGHEST_PROTOCOL)
    assert pickle.loads(out) == RECORDS


@pytest.mark.benchmark(group="decode")
def test_decode(benchmark):
    benchmark.extra_info["compact"] = False
    assert benchmark(pickle.loads, DATA) == RECORDS
