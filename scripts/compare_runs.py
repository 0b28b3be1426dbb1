"""Compares the CSVs of two CPU runs of `vram-lab run` (same seed) made before and after a change,
beside a second run before it: a column that differs between the two runs before (timings, RSS) is
left out; every other column must be identical.
    python3 scripts/compare_runs.py BEFORE BEFORE_AGAIN AFTER"""
import csv,glob,os,sys
def load(p):
    with open(p) as f: return list(csv.reader(f))
base,base2,after=sys.argv[1:4]
files=sorted(os.path.relpath(p,base) for p in glob.glob(base+'/**/*.csv',recursive=True))
fa=sorted(os.path.relpath(p,after) for p in glob.glob(after+'/**/*.csv',recursive=True))
print('files same:',files==fa, len(files), set(files)^set(fa))
bad=0
for f in files:
    A=load(os.path.join(base,f)); B=load(os.path.join(base2,f)); C=load(os.path.join(after,f))
    if len(A)!=len(C) or A[0]!=C[0]: print('SHAPE/HEADER',f,len(A),len(C)); bad+=1; continue
    hdr=A[0]
    # columns stable between base and base2
    stable=[j for j in range(len(hdr)) if all(len(a)>j and len(b)>j and a[j]==b[j] for a,b in zip(A,B))] if len(A)==len(B) else []
    diff=[hdr[j] for j in stable if any(a[j]!=c[j] for a,c in zip(A,C))]
    unstable=[hdr[j] for j in range(len(hdr)) if j not in stable]
    if diff: print('DIFF',f,diff); bad+=1
    else: print('same',f,'(varying run to run:',','.join(unstable[:8])+(',…' if len(unstable)>8 else '')+')')
print('bad',bad)
