//! ggml's graph allocator (`ggml-alloc.c`) replayed over a graph: the compute buffer llama.cpp
//! reserves is the high-water mark of this walk. Each tensor a node makes takes the smallest free
//! block that holds it (not the last one), else the tail; a tensor is freed when its last consumer
//! has run; an op that may run in place takes over its parent's bytes when the parent has no other
//! consumer. One walk serves every backend of the graph, each with its own buffer.

use super::graph::{Graph, Tensor};

/// ggml_dyn_tallocr: free blocks sorted by offset, the last one the endless tail.
struct Blocks {
    alignment: u64,
    free: Vec<(u64, u64)>,
    high: u64,
}

impl Blocks {
    fn new(alignment: u64) -> Self {
        Self { alignment, free: vec![(0, u64::MAX / 2)], high: 0 }
    }

    fn aligned(&self, size: u64) -> u64 {
        size.div_ceil(self.alignment) * self.alignment
    }

    fn alloc(&mut self, size: u64) -> u64 {
        let size = self.aligned(size);
        let last = self.free.len() - 1;
        // The smallest block that holds it, the last of equal ones (`<=` in ggml), never the tail here.
        let mut best: Option<usize> = None;
        for (i, &(_, s)) in self.free[..last].iter().enumerate() {
            if s >= size && best.is_none_or(|b| s <= self.free[b].1) {
                best = Some(i);
            }
        }
        let i = best.unwrap_or(last);
        let offset = self.free[i].0;
        self.free[i].0 += size;
        self.free[i].1 -= size;
        if self.free[i].1 == 0 {
            self.free.remove(i);
        }
        self.high = self.high.max(offset + size);
        offset
    }

    fn free(&mut self, offset: u64, size: u64) {
        let size = self.aligned(size);
        for i in 0..self.free.len() {
            let (o, s) = self.free[i];
            if o + s == offset {
                self.free[i].1 += size;
                if i + 1 < self.free.len() && self.free[i].0 + self.free[i].1 == self.free[i + 1].0 {
                    self.free[i].1 += self.free[i + 1].1;
                    self.free.remove(i + 1);
                }
                return;
            }
            if offset + size == o {
                self.free[i].0 = offset;
                self.free[i].1 += size;
                if i > 0 && self.free[i - 1].0 + self.free[i - 1].1 == self.free[i].0 {
                    self.free[i - 1].1 += self.free[i].1;
                    self.free.remove(i);
                }
                return;
            }
        }
        let at = self.free.iter().position(|&(o, _)| o > offset).unwrap_or(self.free.len());
        self.free.insert(at, (offset, size));
    }
}

#[derive(Clone, Default)]
struct State {
    children: usize,
    views: usize,
    allocated: bool,
    offset: u64,
}

/// The high-water mark of each backend's buffer (indexed by `Tensor::backend`) after one walk
/// over `g`, as `ggml_gallocr_alloc_graph_impl` walks it.
pub fn reserve(g: &Graph, backends: usize, alignment: u64) -> Vec<u64> {
    let mut buffers: Vec<Blocks> = (0..backends).map(|_| Blocks::new(alignment)).collect();
    let mut st = vec![State::default(); g.tensors.len()];

    let allocate = |t: usize, st: &mut Vec<State>, buffers: &mut Vec<Blocks>| {
        let x = &g.tensors[t];
        if st[t].allocated || x.external || x.view_of.is_some() {
            return;
        }
        st[t].allocated = true;
        if x.inplace {
            for &p in &x.srcs {
                let px = &g.tensors[p];
                // A parent that is a view, external or an output is never taken over.
                if px.external || px.view_of.is_some() || px.output || !st[p].allocated || px.layout != x.layout {
                    continue;
                }
                if st[p].children == 1 && st[p].views == 0 {
                    st[t].offset = st[p].offset;
                    st[p].allocated = false;
                    let (ps, ns) = (buffers[px.backend].aligned(px.size), buffers[x.backend].aligned(x.size));
                    if ps > ns {
                        buffers[px.backend].free(st[p].offset + ns, ps - ns);
                    }
                    return;
                }
            }
        }
        st[t].offset = buffers[x.backend].alloc(x.size);
    };

    // Views counted, and the graph's inputs allocated first, in the order nodes name them.
    for &n in &g.nodes {
        let x = &g.tensors[n];
        if let (Some(v), false) = (x.view_of, x.dep) {
            st[v].views += 1;
        }
        if x.input {
            allocate(n, &mut st, &mut buffers);
        }
        for &s in &x.srcs {
            st[s].children += 1;
            if g.tensors[s].input {
                allocate(s, &mut st, &mut buffers);
            }
        }
    }
    for &n in &g.nodes {
        let x: &Tensor = &g.tensors[n];
        for &s in &x.srcs {
            allocate(s, &mut st, &mut buffers);
        }
        allocate(n, &mut st, &mut buffers);
        for &p in &x.srcs {
            st[p].children -= 1;
            if st[p].children > 0 || st[p].views > 0 {
                continue;
            }
            let free = |t: usize, st: &mut Vec<State>, buffers: &mut Vec<Blocks>| {
                let tx = &g.tensors[t];
                if !tx.output && st[t].allocated {
                    buffers[tx.backend].free(st[t].offset, tx.size);
                    st[t].allocated = false;
                }
            };
            match g.tensors[p].view_of {
                Some(v) => {
                    st[v].views -= 1;
                    if st[v].views == 0 && st[v].children == 0 {
                        free(v, &mut st, &mut buffers);
                    }
                }
                None => free(p, &mut st, &mut buffers),
            }
        }
    }
    buffers.iter().map(|b| b.high).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Freed blocks merge with both neighbours, and the smallest block that holds a tensor takes
    /// it: the allocator's two rules, on bytes worked out by hand.
    #[test]
    fn best_fit_and_merging_as_ggml() {
        let mut b = Blocks::new(128);
        let a = b.alloc(1000); // 0..1024
        let c = b.alloc(300); // 1024..1408
        let d = b.alloc(5000); // 1408..6528
        assert_eq!((a, c, d), (0, 1024, 1408));
        b.free(a, 1000);
        b.free(d, 5000); // merges into the tail
        assert_eq!(b.free, vec![(0, 1024), (1408, u64::MAX / 2 - 1408)]);
        // 200 B fits the 1,024 B hole: best fit, not the tail.
        assert_eq!(b.alloc(200), 0);
        // 2,000 B fits no hole: the tail, right after the live 300 B.
        assert_eq!(b.alloc(2000), 1408);
        b.free(c, 300); // joins the hole before it (256..1024); 1408 onwards is taken
        assert_eq!(b.free[0], (256, 1152));
        assert_eq!(b.high, 6528);
    }
}
