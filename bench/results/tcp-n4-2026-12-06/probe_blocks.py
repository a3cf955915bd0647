import json, sys, numpy as np, collections
# per (size, lib): block values = slowest rank's median per block; paired ratios vs first variant
every=json.load(open(sys.argv[1]))
agg=collections.defaultdict(list)
for i,r0 in enumerate(every[0]):
    peers=[rs[i] for rs in every]
    agg[(r0['size'],r0['lib'])].append(max(np.median(p['times_us']) for p in peers))
sizes=sorted({k[0] for k in agg}); libs=[]
for k in agg:
    if k[1] not in libs: libs.append(k[1])
for s in sizes:
    base=np.array(agg[(s,libs[0])])
    for l in libs:
        a=np.array(agg[(s,l)])
        r=base/a if l!=libs[0] else None
        print(f"{s>>10:>6} KiB {l:24s} slowest-rank block medians", " ".join(f"{x:7.0f}" for x in a), "| med %7.0f"%np.median(a), "" if r is None else f"| {libs[0]}/this per block: "+" ".join(f"{x:.2f}" for x in r)+f" (median {np.median(r):.2f})")
