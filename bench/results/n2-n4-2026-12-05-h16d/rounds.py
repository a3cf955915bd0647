"""Each round's slowest-rank median (us) per (collective, bytes, label).

    python rounds.py DIR/results.jsonl
"""
import json, sys, collections
d = collections.defaultdict(dict)
for l in open(sys.argv[1]):
    r = json.loads(l)
    d[(r['collective'], r['bytes'], r['label'])][r['round']] = r['median_s'] * 1e6
for k in sorted(d):
    print(f"{k[0]:10s} {k[1]:>9d} {k[2]:11s} " + " / ".join(f"{d[k][i]:8.1f}" for i in sorted(d[k])))
