//! The bandwidth stage's tables: their columns, the CSVs' names, the views and charts the report draws.

use crate::stage::{ChartSpec, Series, View};

pub mod col {
    pub const TEST: &str = "test";
    pub const WHAT: &str = "what";
    pub const MIB: &str = "mib";
    pub const MS: &str = "ms";
    pub const GBS: &str = "gb_s";
    pub const VENDOR_GBS: &str = "vendor_gb_s";
    pub const PCT_VENDOR: &str = "pct_of_vendor";
    pub const TOK_S_WEIGHTS: &str = "tok_s_if_weights_move_here";
    pub const NOTE: &str = "note";
}

pub const TABLE: &str = "bandwidth";

/// Measured bandwidth per test beside the vendor figure (log scale: 25 to 4,000 GB/s).
const BANDWIDTH_CHART: ChartSpec = ChartSpec {
    title: "带宽 Bandwidths: the straws",
    x: col::TEST,
    x_title: "transfer",
    y_title: "GB/s",
    y_log: true,
    series: &[
        Series::column("measured", &[(col::GBS, 1.0)]),
        Series::column("vendor figure", &[(col::VENDOR_GBS, 1.0)]),
    ],
    // The CPU kernel runs in several tilings under one test name: each its own bar.
    variant: Some(col::NOTE),
    ..ChartSpec::BARS
};

/// The stage's views: what the console, report.html and the notebooks show, in order.
pub fn views() -> Vec<View> {
    use col::*;
    vec![View {
        name: "bandwidth",
        table: TABLE,
        caption: "Stage 4a — measured bandwidths beside the vendor figures, and the tok/s they allow if every weight byte crossed them once per token",
        columns: &[TEST, WHAT, MIB, MS, GBS, VENDOR_GBS, PCT_VENDOR, TOK_S_WEIGHTS, NOTE],
        group_by: &[],
        chart: Some(BANDWIDTH_CHART),
        explain: "带宽决定上限:每个 token 都要把权重读一遍。锁页内存让 DMA 以 PCIe 速度拷贝,可分页内存经过一次中转拷贝,约慢一半。GPU 上的读核是批大小 1 解码的上限;锁页的主机→设备拷贝是流式传输权重的上限;CPU 读主机内存是在原地计算卸载层的上限。host_gemv 的几根柱是同一个 CPU 矩阵 × 向量核的不同分块(每个任务的行数,以及预取)。<br>Pinned memory lets the DMA engines copy at PCIe speed; pageable memory goes through a staging copy at about half of it. The read kernel is the ceiling of batch-1 decoding on the GPU; host→device pinned is the ceiling of streaming weights; the CPU's read of host memory is the ceiling of computing layers where they live. The host_gemv bars are one CPU matrix × vector kernel in its tilings (rows per task, and with prefetch), each named by what its note does not share with the others.",
    }]
}
