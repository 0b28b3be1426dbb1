//! The loading stage's tables: their columns, the CSVs' names, the views and charts the report draws.

use crate::stage::{ChartSpec, Series, View};

pub mod col {
    pub const CHECKPOINT: &str = "checkpoint";
    pub const OP: &str = "op";
    pub const PRECISION: &str = "precision";
    pub const CACHE: &str = "cache";
    pub const OUTCOME: &str = "outcome";
    pub const RESIDENT_PCT: &str = "resident_before_pct";
    pub const FILE_MIB: &str = "file_mib";
    pub const SECONDS: &str = "seconds";
    pub const GBS: &str = "gb_s";
    pub const LOAD_S: &str = "load_s";
    pub const DEVICE_MIB: &str = "device_mib";
    pub const READ_S: &str = "read_s";
    pub const COPY_S: &str = "copy_s";
    pub const FLOOR_S: &str = "floor_s";
    pub const PCT_OF_FLOOR: &str = "floor_pct_of_load";
    pub const DISK_SHARE: &str = "disk_share_pct";
    pub const NOTE: &str = "note";
}

pub const DISK_TABLE: &str = "load_disk";

pub const TIME_TABLE: &str = "load_time";

/// Each load's time beside its floor (file read + host→device copy).
const LOAD_CHART: ChartSpec = ChartSpec {
    title: "加载时间 Loading time: what the disk costs",
    x: "{checkpoint} → {precision}, {cache}",
    x_title: "checkpoint → precision, page cache",
    y_title: "seconds",
    series: &[
        Series::column("load (this run)", &[(col::LOAD_S, 1.0)]),
        Series::column("file read alone", &[(col::READ_S, 1.0)]),
        Series::column("floor: read + host→device copy", &[(col::FLOOR_S, 1.0)]),
    ],
    ..ChartSpec::BARS
};

/// The stage's views: what the console, report.html and the notebooks show, in order.
pub fn views() -> Vec<View> {
    use col::*;
    vec![
        View {
            name: "disk",
            table: DISK_TABLE,
            caption: "Stage 1b — the checkpoint's files written and read back, cold (cache dropped) and warm",
            columns: &[CHECKPOINT, OP, RESIDENT_PCT, FILE_MIB, SECONDS, GBS],
            group_by: &[],
            chart: None,
            explain: "Cold: the files' pages were dropped from the page cache first (posix_fadvise DONTNEED); resident_before_pct says how much the kernel still held, so a cold read that was not cold shows itself. Warm: read again from memory. The safetensors write is timed alone (making the synthetic values apart); the GGUF's includes quantizing. 冷读取 = 磁盘速度;热读取 = 内存速度。",
        },
        View {
            name: "load",
            table: TIME_TABLE,
            caption: "Stage 1b — load time per checkpoint, precision and cache state, beside its floor (file read + host→device copy)",
            columns: &[CHECKPOINT, PRECISION, CACHE, OUTCOME, RESIDENT_PCT, FILE_MIB, DEVICE_MIB, LOAD_S, READ_S, COPY_S, FLOOR_S, PCT_OF_FLOOR, DISK_SHARE, NOTE],
            group_by: &[],
            chart: Some(LOAD_CHART),
            explain: "floor = the file read at this cache state + the weights' host→device copy at the pinned rate measured in this run, one after the other, as the lab loads tensor by tensor. disk_share_pct = how much of the load the read alone accounts for: high on a slow disk cold, near zero warm. Q4 from safetensors quantizes on the CPU while loading; the GGUF is quantized once and read as is. 加载时间 = 读磁盘 + 转换 + 拷贝到显卡。",
        },
    ]
}
