//! Every `POPCORN_*` environment variable, read once into one [`Settings`] value.
//!
//! | variable | field | effect |
//! |---|---|---|
//! | `POPCORN_DEVICE=cpu\|cuda\|cuda:N\|cuda:0,1\|cuda:all` | [`Settings::device`] | where `Context::from_env()` runs (default: the first usable GPU, else the CPU); several GPUs run plans partitioned along the points, one rank each, through NCCL |
//! | `POPCORN_LOG=plan,fusion,cache,time,graphs` (or `all`) | [`Settings::log`] | the graph after each pass and the final plan; why each producer fused or not; kernel-cache hits and compiles; every step's device time with its rates, and each run's host time (preparing, allocating outputs, running); every run recorded as a CUDA graph, and why a plan is not |
//! | `POPCORN_DUMP_DIR=dir` | [`Settings::dump_dir`] | every new plan (text, DOT, JSON) and every generated kernel's `.cu` and `.ptx` |
//! | `POPCORN_SYNC=1` | [`Settings::sync`] | synchronise and check after every step, naming the step that failed |
//! | `POPCORN_NO_FUSION=1` | [`Settings::no_fusion`] | every element-wise operation its own kernel |
//! | `POPCORN_CLUSTER_SUMS_MAX_K=N`, `POPCORN_NO_CLUSTER_SUMS=1` | [`Settings::cluster_sums_max_k`] | the cluster-sums and label-sums patterns on up to `N` clusters, or off |
//! | `POPCORN_TF32=1` | [`Settings::tf32`] | dense products (GEMM, SYRK) on TF32 tensor cores |
//! | `POPCORN_SYRK_BLOCK_ROWS=B` | [`Settings::syrk_block_rows`] | rows per GEMM block row of a SYRK on the GPU (`0`: cuBLAS SYRK) |
//! | `POPCORN_NO_GRAPHS=1` | [`Settings::no_graphs`] | every run of a plan queues its steps one by one, instead of replaying the CUDA graph recorded at its second run with the same tensors |
//! | `POPCORN_NO_OVERLAP=1` | [`Settings::no_overlap`] | a SYRK's map after the whole product instead of band by band beside it |
//! | `POPCORN_TF32_ROUND_IN_KERNEL=1` | [`Settings::tf32_round_in_kernel`] | TF32 contractions round every staged chunk of their operands instead of rounding the operands once in memory first |
//! | `POPCORN_NO_WARP_SPECIALISATION=1` | [`Settings::no_warp_specialisation`] | TF32 contractions on Hopper keep the lock-step body (all warps stage, multiply and fold in turn) instead of the warp-specialised one (a producer thread copying through the tensor memory accelerator, two consumer warpgroups) |
//! | `POPCORN_NO_TENSOR_CORE_SUMS=1` | [`Settings::no_tensor_core_sums`] | cluster sums over a kernel matrix held in 16 bits use the bins kernel (a shared-memory bin per label) instead of tensor-core products with the labels' one-hot selection (k <= 128, compute capability 8.0 and up) |
//! | `POPCORN_NO_SUMS_TEAMS=1` | [`Settings::no_sums_teams`] | tensor-core cluster sums run one warp per block (k <= 64; the bins kernel above) instead of teams of four warps sharing each row group's tiles (k <= 128) |
//! | `POPCORN_NO_SIDE_LANE=1` | [`Settings::no_side_lane`] | a GPU run queues every step on one lane, instead of the short steps before a plan's cluster sums that the sums do not read (cluster sizes, maps, the diagonal) on a second lane beside them, where the sums read at most 1 GiB (off anyway with `POPCORN_SYNC` or `POPCORN_LOG=time`) |
//! | `POPCORN_CACHE_DIR=dir` | [`Settings::cache_dir`] | where compiled kernels are kept (default `$XDG_CACHE_HOME/popcorn/kernels`, else `~/.cache/popcorn/kernels`) |
//! | `POPCORN_REQUIRE_GPU=1` | [`Settings::require_gpu`] | GPU tests fail instead of skipping where no GPU is usable |
//! | `POPCORN_RANK=r`, `POPCORN_WORLD_SIZE=P`, `POPCORN_LOCAL_RANK=l` (or a launcher's own: Open MPI's `OMPI_COMM_WORLD_*`, PMIx, PMI, Slurm, torchrun's `RANK`/`WORLD_SIZE`/`LOCAL_RANK`) | read by popcorn-runtime's `World::from_env` | this process is rank `r` of a run over `P` processes: its contexts run their plans partitioned, this process running rank `r` (on `cuda:{l}` for a GPU) |
//! | `POPCORN_RENDEZVOUS=file` (or `MASTER_ADDR` and `MASTER_PORT`), `POPCORN_HOST=address` | read by popcorn-runtime's `HostChannel::connect` | where the processes of a run meet: rank 0 writes its address (`POPCORN_HOST`, default 127.0.0.1, and a free port) into the file every process sees, or listens at `MASTER_ADDR:MASTER_PORT` |
//! | `POPCORN_RANK_TIMEOUT=seconds` | [`Settings::rank_timeout_s`] | how long the ranks of a run over several GPUs wait for one another's work before all are stopped with an error naming the rank that did not finish (default 600) |
//! | `POPCORN_REQUIRE_GPUS=N` | [`Settings::require_gpus`] | tests that need several GPUs (NCCL ranks) fail instead of skipping where fewer than `N` are usable |
//! | `POPCORN_CONTRACTIONS=auto\|always\|never` | [`Settings::contractions`] | fuse products with their consumers where the cost model says so, wherever possible, or never |
//! | `POPCORN_CPU_RANKS=P` | [`Settings::cpu_ranks`] | CPU contexts run plans partitioned along the points `n` over `P` in-process ranks with an in-memory collective (`P` > 1; the results equal one rank's) |
//! | `POPCORN_MEMORY_LIMIT=bytes` (or with `K`, `M`, `G`, `T`: powers of 1024) | [`Settings::memory_limit`] | the most host memory the CPU backend's buffers may take (plans that need more are refused with the numbers) |
//!
//! A flag is on when its variable is set to anything but empty or `0`. A value that cannot be
//! read (`POPCORN_SYRK_BLOCK_ROWS=many`) is reported once on stderr, naming the variable and
//! what it takes, and the default is used.

use std::path::PathBuf;
use std::sync::OnceLock;

/// The topics `POPCORN_LOG` can switch on.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LogTopics {
    /// `plan`: the graph after each pass, and the final plan.
    pub plan: bool,
    /// `fusion`: why each producer fused into its consumer or not.
    pub fusion: bool,
    /// `cache`: kernel-cache hits, misses and compiles.
    pub cache: bool,
    /// `time`: every step's device time with its rates.
    pub time: bool,
    /// `graphs`: every run recorded as a CUDA graph, and why a plan's runs are not.
    pub graphs: bool,
}

impl LogTopics {
    /// Parses a comma- or space-separated list of topics (`all` for every one); returns the
    /// topics and the words that are not topics.
    pub fn parse(text: &str) -> (LogTopics, Vec<String>) {
        let mut t = LogTopics::default();
        let mut unknown = Vec::new();
        for word in text.split([',', ' ']).filter(|w| !w.is_empty()) {
            match word {
                "plan" => t.plan = true,
                "fusion" => t.fusion = true,
                "cache" => t.cache = true,
                "time" => t.time = true,
                "graphs" => t.graphs = true,
                "all" => {
                    t = LogTopics {
                        plan: true,
                        fusion: true,
                        cache: true,
                        time: true,
                        graphs: true,
                    }
                }
                other => unknown.push(other.to_string()),
            }
        }
        (t, unknown)
    }
}

/// Popcorn's settings from the environment (see the [module](self) table).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Settings {
    /// `POPCORN_DEVICE`, as written.
    pub device: Option<String>,
    /// `POPCORN_LOG`.
    pub log: LogTopics,
    /// `POPCORN_DUMP_DIR`.
    pub dump_dir: Option<PathBuf>,
    /// `POPCORN_SYNC`.
    pub sync: bool,
    /// `POPCORN_NO_FUSION`.
    pub no_fusion: bool,
    /// `POPCORN_CLUSTER_SUMS_MAX_K` (`Some(0)` with `POPCORN_NO_CLUSTER_SUMS`).
    pub cluster_sums_max_k: Option<usize>,
    /// `POPCORN_TF32`.
    pub tf32: bool,
    /// `POPCORN_SYRK_BLOCK_ROWS`.
    pub syrk_block_rows: Option<usize>,
    /// `POPCORN_NO_OVERLAP`.
    pub no_overlap: bool,
    /// `POPCORN_NO_GRAPHS`.
    pub no_graphs: bool,
    /// `POPCORN_TF32_ROUND_IN_KERNEL`.
    pub tf32_round_in_kernel: bool,
    /// `POPCORN_NO_WARP_SPECIALISATION`.
    pub no_warp_specialisation: bool,
    /// `POPCORN_NO_TENSOR_CORE_SUMS`.
    pub no_tensor_core_sums: bool,
    /// `POPCORN_NO_SUMS_TEAMS`.
    pub no_sums_teams: bool,
    /// `POPCORN_NO_SIDE_LANE`.
    pub no_side_lane: bool,
    /// `POPCORN_CACHE_DIR`, else `$XDG_CACHE_HOME/popcorn/kernels`, else
    /// `~/.cache/popcorn/kernels` (`None` when none of these is set).
    pub cache_dir: Option<PathBuf>,
    /// `POPCORN_REQUIRE_GPU`.
    pub require_gpu: bool,
    /// `POPCORN_RANK_TIMEOUT`: seconds the ranks of a multi-GPU run wait for one another.
    pub rank_timeout_s: Option<usize>,
    /// `POPCORN_REQUIRE_GPUS`: how many GPUs the multi-GPU tests require.
    pub require_gpus: Option<usize>,
    /// `POPCORN_CONTRACTIONS=auto|always|never`.
    pub contractions: crate::contraction_policy::ContractionPolicy,
    /// `POPCORN_MEMORY_LIMIT`, in bytes.
    pub memory_limit: Option<u64>,
    /// `POPCORN_CPU_RANKS`: in-process ranks of CPU contexts.
    pub cpu_ranks: Option<usize>,
    /// Values that could not be read, one message each.
    pub problems: Vec<String>,
}

impl Settings {
    /// Settings from a variable lookup (`get(name)` is the variable's value, if set).
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Settings {
        let value = |name: &str| get(name).filter(|v| !v.is_empty());
        let flag = |name: &str| value(name).is_some_and(|v| v != "0");
        let mut problems = Vec::new();
        let mut number = |name: &str, what: &str| -> Option<usize> {
            let v = value(name)?;
            match v.trim().parse() {
                Ok(n) => Some(n),
                Err(_) => {
                    problems.push(format!(
                        "{name}={v} is not a number; it takes {what}; using the default"
                    ));
                    None
                }
            }
        };
        let mut cluster_sums_max_k = number(
            "POPCORN_CLUSTER_SUMS_MAX_K",
            "the largest number of clusters for the cluster-sums pattern (0: off)",
        );
        if flag("POPCORN_NO_CLUSTER_SUMS") {
            cluster_sums_max_k = Some(0);
        }
        let syrk_block_rows = number(
            "POPCORN_SYRK_BLOCK_ROWS",
            "rows per GEMM block row of a SYRK (0: cuBLAS SYRK)",
        );
        let cpu_ranks = number(
            "POPCORN_CPU_RANKS",
            "the number of in-process ranks of CPU contexts",
        );
        let rank_timeout_s = number(
            "POPCORN_RANK_TIMEOUT",
            "the seconds the ranks of a multi-GPU run wait for one another",
        );
        let require_gpus = number(
            "POPCORN_REQUIRE_GPUS",
            "how many GPUs the multi-GPU tests require",
        );
        let (log, unknown) = LogTopics::parse(&value("POPCORN_LOG").unwrap_or_default());
        if !unknown.is_empty() {
            problems.push(format!(
                "POPCORN_LOG: unknown topic(s) {}; the topics are plan, fusion, cache, time, graphs, all",
                unknown.join(", ")
            ));
        }
        let contractions = match value("POPCORN_CONTRACTIONS") {
            None => crate::contraction_policy::ContractionPolicy::Auto,
            Some(v) => v.parse().unwrap_or_else(|e: String| {
                problems.push(format!("POPCORN_CONTRACTIONS: {e}; using auto"));
                crate::contraction_policy::ContractionPolicy::Auto
            }),
        };
        let memory_limit = value("POPCORN_MEMORY_LIMIT").and_then(|v| match parse_bytes(&v) {
            Some(b) => Some(b),
            None => {
                problems.push(format!(
                    "POPCORN_MEMORY_LIMIT={v} is not a size; it takes bytes, or a number with K, \
                     M, G or T (powers of 1024), e.g. 8G; using no limit"
                ));
                None
            }
        });
        let path = |name: &str| value(name).map(PathBuf::from);
        let cache_dir = path("POPCORN_CACHE_DIR")
            .or_else(|| path("XDG_CACHE_HOME").map(|d| d.join("popcorn").join("kernels")))
            .or_else(|| path("HOME").map(|h| h.join(".cache").join("popcorn").join("kernels")));
        Settings {
            device: value("POPCORN_DEVICE"),
            log,
            dump_dir: path("POPCORN_DUMP_DIR"),
            sync: flag("POPCORN_SYNC"),
            no_fusion: flag("POPCORN_NO_FUSION"),
            cluster_sums_max_k,
            tf32: flag("POPCORN_TF32"),
            syrk_block_rows,
            no_overlap: flag("POPCORN_NO_OVERLAP"),
            no_graphs: flag("POPCORN_NO_GRAPHS"),
            tf32_round_in_kernel: flag("POPCORN_TF32_ROUND_IN_KERNEL"),
            no_warp_specialisation: flag("POPCORN_NO_WARP_SPECIALISATION"),
            no_tensor_core_sums: flag("POPCORN_NO_TENSOR_CORE_SUMS"),
            no_sums_teams: flag("POPCORN_NO_SUMS_TEAMS"),
            no_side_lane: flag("POPCORN_NO_SIDE_LANE"),
            cache_dir,
            require_gpu: flag("POPCORN_REQUIRE_GPU"),
            contractions,
            memory_limit,
            cpu_ranks,
            require_gpus,
            rank_timeout_s,
            problems,
        }
    }

    /// Settings from this process's environment.
    pub fn from_env() -> Settings {
        Settings::from_vars(|name| std::env::var(name).ok())
    }
}

/// A size in bytes: digits, optionally followed by `K`, `M`, `G` or `T` (powers of 1024, an
/// optional `B` or `iB` after them, any case).
pub fn parse_bytes(text: &str) -> Option<u64> {
    let t = text.trim().to_ascii_uppercase();
    let t = t
        .strip_suffix("IB")
        .or_else(|| t.strip_suffix('B'))
        .unwrap_or(&t);
    let (digits, shift) = match t.chars().last()? {
        'K' => (&t[..t.len() - 1], 10),
        'M' => (&t[..t.len() - 1], 20),
        'G' => (&t[..t.len() - 1], 30),
        'T' => (&t[..t.len() - 1], 40),
        _ => (t, 0),
    };
    let n: u64 = digits.trim().parse().ok()?;
    n.checked_mul(1u64 << shift)
}

/// The process's settings, read from the environment on first use (problems are reported on
/// stderr then, once).
pub fn settings() -> &'static Settings {
    static SETTINGS: OnceLock<Settings> = OnceLock::new();
    SETTINGS.get_or_init(|| {
        let s = Settings::from_env();
        for p in &s.problems {
            eprintln!("popcorn: {p}");
        }
        s
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn from(pairs: &[(&str, &str)]) -> Settings {
        let owned: Vec<(String, String)> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Settings::from_vars(|name| {
            owned
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.clone())
        })
    }

    #[test]
    fn nothing_set_means_defaults() {
        let s = from(&[]);
        assert_eq!(s, Settings::default());
    }

    #[test]
    fn flags_numbers_and_topics() {
        let s = from(&[
            ("POPCORN_SYNC", "1"),
            ("POPCORN_TF32", "0"),
            ("POPCORN_NO_FUSION", ""),
            ("POPCORN_CLUSTER_SUMS_MAX_K", "64"),
            ("POPCORN_SYRK_BLOCK_ROWS", " 2048 "),
            ("POPCORN_LOG", "plan,time"),
            ("POPCORN_DEVICE", "cuda:1"),
            ("POPCORN_CPU_RANKS", "3"),
            ("POPCORN_REQUIRE_GPUS", "2"),
            ("POPCORN_NO_GRAPHS", "1"),
            ("HOME", "/home/u"),
        ]);
        assert_eq!(s.cpu_ranks, Some(3));
        assert_eq!(s.require_gpus, Some(2));
        assert!(s.sync && !s.tf32 && !s.no_fusion && s.no_graphs);
        assert_eq!(s.cluster_sums_max_k, Some(64));
        assert_eq!(s.syrk_block_rows, Some(2048));
        assert!(s.log.plan && s.log.time && !s.log.cache && !s.log.fusion && !s.log.graphs);
        assert_eq!(s.device.as_deref(), Some("cuda:1"));
        assert_eq!(
            s.cache_dir,
            Some(PathBuf::from("/home/u/.cache/popcorn/kernels"))
        );
        assert!(s.problems.is_empty());
        let all = from(&[("POPCORN_LOG", "all"), ("POPCORN_NO_CLUSTER_SUMS", "yes")]);
        assert!(all.log.plan && all.log.fusion && all.log.cache && all.log.time && all.log.graphs);
        assert_eq!(all.cluster_sums_max_k, Some(0));
    }

    #[test]
    fn unreadable_values_are_reported_and_ignored() {
        let s = from(&[
            ("POPCORN_SYRK_BLOCK_ROWS", "many"),
            ("POPCORN_LOG", "plan,timing"),
        ]);
        assert_eq!(s.syrk_block_rows, None);
        assert!(s.log.plan);
        assert_eq!(s.problems.len(), 2, "{:?}", s.problems);
        assert!(s.problems[0].contains("POPCORN_SYRK_BLOCK_ROWS=many"));
        assert!(s.problems[1].contains("timing"));
    }

    #[test]
    fn memory_limits_take_bytes_or_binary_suffixes() {
        assert_eq!(parse_bytes("1048576"), Some(1 << 20));
        assert_eq!(parse_bytes("8G"), Some(8 << 30));
        assert_eq!(parse_bytes("512mib"), Some(512 << 20));
        assert_eq!(parse_bytes(" 2 KB "), Some(2048));
        assert_eq!(parse_bytes("3T"), Some(3 << 40));
        assert_eq!(parse_bytes("lots"), None);
        assert_eq!(parse_bytes("99999999999T"), None);
        assert_eq!(
            from(&[("POPCORN_MEMORY_LIMIT", "4G")]).memory_limit,
            Some(4 << 30)
        );
        let bad = from(&[("POPCORN_MEMORY_LIMIT", "huge")]);
        assert_eq!(bad.memory_limit, None);
        assert!(
            bad.problems[0].contains("POPCORN_MEMORY_LIMIT=huge"),
            "{:?}",
            bad.problems
        );
    }
}
