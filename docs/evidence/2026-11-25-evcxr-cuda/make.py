import nbformat
nb = nbformat.v4.new_notebook()
nb.cells = [
    nbformat.v4.new_code_cell(':dep vram-lab = { path = "/work/main", features = ["cuda"] }'),
    nbformat.v4.new_code_cell('use vram_lab::prelude::*;'),
    nbformat.v4.new_code_cell('println!("{}", vram_lab::notebook::device_summary("cpu")?);'),
]
for i, c in enumerate(nb.cells):
    c["id"] = f"c{i}"
nb.metadata = {"kernelspec": {"display_name": "Rust", "language": "rust", "name": "rust"}}
nbformat.write(nb, "cuda_first_cell.ipynb")
