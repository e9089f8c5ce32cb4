"""The one TAP producer of the Python tests (e2e, shim, preload, windows, docs, packaging).

main(TESTS) runs each test function as one test point (tests_of(globals()): a module's test_*
functions, in the order they are written). A failing assertion (any exception) fails that test
alone, its traceback printed as TAP comments; Skip("reason") reports it skipped with the reason.
SF_ONLY=WORD runs only the tests whose name contains WORD. With fixture=F, each test runs as
`with F() as f: test(f)`, so what the fixture tears down (and any failure it finds then)
belongs to that test (tests/lib/sfharness.py's Scene). With setup=S, the whole run happens
inside `with S():` (a network namespace, say); a Skip from S skips the run, with its reason.
meson's timeout (SIGTERM) unwinds the run: every with block tears down what it set up.

Standard library only: the tests must run on a fresh Debian machine."""

import contextlib
import os
import signal
import sys
import time
import traceback


class Skip(Exception):
    """Raised by a test, or what it sets up, that cannot run here: the message is the reason."""


class Tap:
    """The runner's writer: numbers test points and prints them as they come; counts failures."""

    def __init__(self, out=None):
        self.out = out or sys.stdout
        self.n = 0
        self.failed = 0

    def _print(self, line):
        self.out.write(line + "\n")
        self.out.flush()

    def plan(self, count):
        """Prints the plan, first: the count of tests is known before they run."""
        self._print("TAP version 13")
        self._print("1..%d" % count)

    def comment(self, text):
        for line in str(text).splitlines() or [""]:
            self._print("# " + line)

    def ok(self, cond, desc, diag=""):
        """One test point; diag (anything with a str()) is printed as comments when it fails."""
        self.n += 1
        if cond:
            self._print("ok %d - %s" % (self.n, desc))
        else:
            self.failed += 1
            self._print("not ok %d - %s" % (self.n, desc))
            if str(diag):
                self.comment(diag)
            # meson's --print-errorlogs shows a failed test's stderr, not its TAP comments:
            # the reason reaches CI's log too.
            sys.stderr.write("not ok %d - %s\n%s\n" % (self.n, desc, diag))
            sys.stderr.flush()
        return cond

    def skip(self, desc, reason):
        self.n += 1
        self._print("ok %d - %s # SKIP %s" % (self.n, desc, reason))

    def case(self, test, fixture=None, name=None):
        """Runs test() (test(f) inside `with fixture() as f`) as one test point."""
        name = name or test_name(test)
        start = time.monotonic()
        try:
            if fixture is None:
                test()
            else:
                with fixture() as f:
                    test(f)
        except Skip as e:
            self.skip(name, e)
            return
        except Exception:
            self.ok(False, name, traceback.format_exc())
            return
        self.ok(True, "%s (%.1fs)" % (name, time.monotonic() - start))

    def finish(self):
        """The exit status: 1 when a test point failed."""
        return 1 if self.failed else 0


def test_name(test):
    name = test.__name__
    return (name[5:] if name.startswith("test_") else name).replace("_", " ")


def tests_of(namespace):
    """The test_* functions of a module's globals(), in the order they are defined."""
    tests = [v for k, v in namespace.items() if k.startswith("test_") and callable(v)]
    return sorted(tests, key=lambda f: f.__code__.co_firstlineno)


def _terminated(signum, frame):
    raise SystemExit(128 + signum)


def run(tests, fixture=None, setup=None):
    """Runs test functions (see the module's text); returns the exit status."""
    # meson's timeout sends SIGTERM: unwind, so that every with block tears down what it set up
    signal.signal(signal.SIGTERM, _terminated)
    only = os.environ.get("SF_ONLY")
    tests = [t for t in tests if not only or only in t.__name__]
    tap = Tap()
    with contextlib.ExitStack() as stack:
        if setup is not None:
            try:
                stack.enter_context(setup())
            except Skip as e:
                print("1..0 # SKIP %s" % e, flush=True)
                return 0
            except Exception:
                tap.plan(1)
                tap.ok(False, "set-up of the test run", traceback.format_exc())
                return 1
        tap.plan(len(tests))
        for t in tests:
            tap.case(t, fixture)
        # a failure in setup's teardown fails the run, after the test points
        try:
            stack.close()
        except Exception:
            tap.comment("tearing down the test run failed:\n" + traceback.format_exc())
            return 1
    return tap.finish()


def main(tests, fixture=None, setup=None):
    sys.exit(run(tests, fixture, setup))
