"""Peer time / gloocy time per (collective, bytes): the median over rounds
of each side's slowest-rank median.

    python ratios.py DIR/results.jsonl gloocy:shm mpi4py
"""
import json, sys, collections, statistics as st
rows=[json.loads(l) for l in open(sys.argv[1])]
base=sys.argv[2]; peers=sys.argv[3:]
d=collections.defaultdict(list)
for r in rows: d[(r['collective'], r['bytes'], r['label'])].append(r['median_s'])
med={k:st.median(v) for k,v in d.items()}
colls=sorted({k[0] for k in med})
lo={}
for c in colls:
    for b in sorted({k[1] for k in med if k[0]==c}):
        g=med.get((c,b,base))
        if not g: continue
        out=[f"{c:15s}{b:>10d}"]
        for p in peers:
            m=med.get((c,b,p))
            out.append(f"{p}={m/g:6.2f}" if m else f"{p}=  -  ")
        print("  ".join(out))
