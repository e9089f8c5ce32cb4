"""TAP output for the python packaging tests: check() records a result, report() prints the
plan and the results and returns the exit status (a skip is not a failure)."""
results = []


def check(ok, desc, detail=""):
    results.append((bool(ok), desc, detail))
    return ok


def skip(desc, reason):
    results.append((None, desc, reason))


def report():
    print(f"1..{len(results)}")
    for i, (ok, desc, detail) in enumerate(results, 1):
        if ok is None:
            print(f"ok {i} - {desc} # SKIP {detail}")
            continue
        print(f"{'ok' if ok else 'not ok'} {i} - {desc}")
        if not ok:
            for line in detail.splitlines():
                print(f"# {line}")
    return 0 if all(r[0] is not False for r in results) else 1
