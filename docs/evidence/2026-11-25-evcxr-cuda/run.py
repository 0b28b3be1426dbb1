import time, nbformat
from nbclient import NotebookClient
nb = nbformat.read("cuda_first_cell.ipynb", as_version=4)
t = time.time()
times = []
class C(NotebookClient):
    pass
client = NotebookClient(nb, timeout=3600, kernel_name="rust", resources={"metadata": {"path": "/tmp/evcxr-cuda"}})
with client.setup_kernel():
    for i, cell in enumerate(nb.cells):
        s = time.time()
        client.execute_cell(cell, i)
        times.append(round(time.time() - s, 1))
        print(f"cell {i}: {times[-1]} s", flush=True)
print("total", round(time.time() - t, 1), "s")
nbformat.write(nb, "cuda_first_cell.out.ipynb")
for c in nb.cells:
    for o in c.get("outputs", []):
        print(o.get("output_type"), str(o.get("text", o.get("data", "")))[:300])
