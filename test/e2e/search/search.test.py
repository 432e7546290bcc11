"""Checks on search reports (search.test)."""
import json
import sys


def load(path):
    with open(path) as f:
        return json.load(f)


def main(argv):
    what = argv[0]
    if what == "same-best":
        search, brute = load(argv[1])["planner"], load(argv[2])["planner"]
        same = search["chose"] == brute["chose"]
        print(f"search {search['chose']} {'=' if same else 'DIFFER'} brute force {brute['chose']} "
              f"of {len(brute['lowered'])} plans")
        return 0 if same else 1
    if what == "report":
        r = load(argv[1])
        p = r["planner"]
        fits = [e for e in p["lowered"] if e["verdict"] == "ok"]
        best = min(fits, key=lambda e: e["evaluated"]["step_s"])
        print(f"planner: {p['mode']}, " + ("chose the fastest lowered plan that fits"
                                           if best["plan"] == p["chose"] else "CHOSE ANOTHER"))
        s = r["strategy"]
        keys = ("dp", "tp", "pp", "sp", "ep", "zero", "microbatches", "remat", "sequence_parallel")
        same = all(s[k] == best[k] for k in keys)
        print("strategy " + ("matches the chosen plan" if same else "DIFFERS from the chosen plan"))
        if abs(r["predicted"]["step_time_s"] - best["evaluated"]["step_s"]) > 1e-12:
            print("PREDICTION DIFFERS")
        for e in fits:
            if e is not best and "lost_on" not in e:
                print("LOSER WITHOUT REASON")
        return 0
    if what == "pins":
        # Every plan the search lowered keeps what --strategy pinned, and so
        # does the one written.
        r = load(argv[1])
        pins = {k: int(v) for k, v in (a.split("=") for a in argv[2:])}
        lowered = r["planner"]["lowered"]
        broken = [e["plan"] for e in lowered if any(e[k] != v for k, v in pins.items())]
        broken += ["written plan"] if any(r["strategy"][k] != v for k, v in pins.items()) else []
        print(f"{r['planner']['mode']}: {len(lowered)} lowered plans, pins",
              " ".join(argv[2:]), "kept" if not broken else "BROKEN by " + "; ".join(broken))
        return 0 if not broken else 1
    if what == "fits":
        r = load(argv[1])
        print("fits 80 GB:", r["memory_bytes"]["peak_per_device"] <= 80e9, r["planner"]["chose"])
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
