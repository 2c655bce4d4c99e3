"""A generator or coroutine function given to be timed (issue 31 item 2): calling one only
creates the generator or coroutine, so its timing hid any slowdown of the work. It is refused
with what to pass; so is a timed function that returns one."""

from __future__ import annotations

import pytest
from hpml_testing import FAST

BODIES = """
    import asyncio, time
    import pytest

    def produce():
        time.sleep(0.002)
        yield 1

    async def wait():
        await asyncio.sleep(0.002)
"""


@pytest.mark.parametrize("call, said", [
    ("hpml.time(produce)", "hpml.time: produce is a generator function: a call only creates "
                           "the generator, its body would not be timed; pass a function that "
                           "runs it, e.g. lambda: list(produce(...))"),
    ("benchmark(produce)", "benchmark(...): produce is a generator function*"),
    ("benchmark.pedantic(produce, rounds=2)",
     "benchmark.pedantic(...): produce is a generator function*"),
    ("hpml.time(wait)", "hpml.time: wait is a coroutine function: a call only creates the "
                        "coroutine, its body would not be timed; pass a function that runs "
                        "it, e.g. lambda: asyncio.run(wait(...))*"),
    ("benchmark(wait)", "benchmark(...): wait is a coroutine function*"),
    ("benchmark.pedantic(wait, rounds=2)", "benchmark.pedantic(...): wait is a coroutine*"),
    ("hpml.time(lambda: produce())", "*the timed function returned a generator: only its "
                                     "creation was timed, not its work; run it inside the "
                                     "timed function, e.g. list(...)"),
    ("benchmark.pedantic(lambda: wait(), rounds=2)",
     "*the timed function returned a coroutine*asyncio.run(...)"),
])
def test_a_generator_or_coroutine_is_refused_saying_what_to_pass(
        pytester: pytest.Pytester, call: str, said: str) -> None:
    pytester.makepyfile(BODIES + f"""
    def test_timed(hpml, benchmark):
        with pytest.raises(TypeError) as refused:
            {call}
        print("REFUSED:", refused.value)
    """)
    result = pytester.runpytest(*FAST, "-p", "no:benchmark", "-s", "-W",
                                "error::RuntimeWarning")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines([f"*REFUSED: {said}"])


def test_running_the_work_inside_the_timed_function_times_it(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(BODIES + """
    def test_timed(hpml):
        timing = hpml.time(lambda: list(produce()))
        assert timing.median >= 0.002
        timing = hpml.time(lambda: asyncio.run(wait()), name="awaited")
        assert timing.median >= 0.002
    """)
    pytester.runpytest(*FAST, "-p", "no:benchmark").assert_outcomes(passed=1)


def test_pedantic_setup_that_returns_no_argument_tuple_is_refused(
        pytester: pytest.Pytester) -> None:
    # Issue 31 item 15: setup returning (1, {}) raised "'int' object is not iterable".
    pytester.makepyfile("""
    import pytest

    def test_timed(benchmark):
        with pytest.raises(TypeError, match=r"setup must return \\(args, kwargs\\), e.g. "
                                            r"return \\(data,\\), \\{\\}; "
                                            r"it returned \\(1, \\{\\}\\)"):
            benchmark.pedantic(lambda x: x, setup=lambda: (1, {}), rounds=2)
    """)
    pytester.runpytest(*FAST, "-p", "no:benchmark").assert_outcomes(passed=1)
