import json, sys, collections, numpy as np
# gloocy:tcp / torch-gloo ratio (torch time / gloocy time: > 1 gloocy faster) per job, per (collective, size)
def load(d):
    rows=[json.loads(l) for l in open(d+'/results.jsonl')]
    out=collections.defaultdict(dict)
    for r in rows:
        if r['collective'] not in ('bcast','alltoall','allreduce'): continue
        out[(r['collective'], r['size'])].setdefault(r['label'], []).append(r['median_s'])
    return {k:(np.median(v['torch-gloo'])/np.median(v['gloocy:tcp']), np.median(v['gloocy:tcp'])) for k,v in out.items() if 'torch-gloo' in v and 'gloocy:tcp' in v}
pref=sys.argv[1]; runs=sys.argv[2:]
res={r:load(pref+r) for r in runs}
keys=sorted(next(iter(res.values())))
print("collective size | " + " | ".join(runs))
for k in keys:
    print(f"{k[0]} {k[1]>>20} MiB | " + " | ".join(f"{res[r][k][0]:.2f}x ({res[r][k][1]*1e3:.1f} ms)" for r in runs))
