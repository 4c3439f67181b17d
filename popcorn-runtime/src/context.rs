//! The user's entry point: a [`Context`] owns a backend (CPU or CUDA), makes tensors, and runs
//! programs, planning each program once per shape signature and reusing the plan and its
//! workspace on every later call (so a loop allocates nothing).

use crate::args::{Args, Outputs};
use crate::backend::{to_half_bits, Arg, Backend, ElemType, HostSlice, HostVec};
use crate::cpu_backend::CpuBackend;
use crate::cuda::CudaBackend;
use crate::device::DeviceSpec;
use crate::error::RuntimeError;
use crate::executor::Workspace;
use crate::ranks::tensors as ranked;
use crate::ranks::world::{HostChannel, World, WorldCollectives};
use crate::ranks::{Collectives, InMemory, RankHeld, RankInput, SpareBuffers};
use crate::recorded::Recorded;
use crate::tensor::{Tensor, TensorData, TensorShape};
use popcorn_dsl::plan::collective::PartitionSpec;
use popcorn_dsl::plan::{Home, Plan, ValueKind};
use popcorn_dsl::target::TargetKind;
use popcorn_dsl::{DType, DimBindings, PlannerConfig, Program, ScalarBindings, Storage};
use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::{Arc, Mutex};

/// A backend's view of tensors: which buffers of a [`Tensor`] are its own.
pub(crate) trait TensorStore: Backend + Sized {
    fn bufs(data: &TensorData) -> Option<&[Self::Buf]>;
    fn wrap(bufs: Vec<Self::Buf>) -> TensorData;
    /// What the ranks of a partitioned context hold of a tensor, when they hold it.
    fn ranked(data: &TensorData) -> Option<&[RankHeld<Self::Buf>]>;
    fn wrap_ranked(held: Vec<RankHeld<Self::Buf>>) -> TensorData;
    /// What the ranks hold of a tensor, taken out of it.
    fn into_ranked(data: TensorData) -> Option<Vec<RankHeld<Self::Buf>>>;
}

impl TensorStore for CpuBackend {
    fn bufs(data: &TensorData) -> Option<&[Self::Buf]> {
        match data {
            TensorData::Cpu(b) => Some(b),
            _ => None,
        }
    }
    fn wrap(bufs: Vec<Self::Buf>) -> TensorData {
        TensorData::Cpu(bufs)
    }
    fn ranked(data: &TensorData) -> Option<&[RankHeld<Self::Buf>]> {
        match data {
            TensorData::CpuRanks(h) => Some(h),
            _ => None,
        }
    }
    fn wrap_ranked(held: Vec<RankHeld<Self::Buf>>) -> TensorData {
        TensorData::CpuRanks(held)
    }
    fn into_ranked(data: TensorData) -> Option<Vec<RankHeld<Self::Buf>>> {
        match data {
            TensorData::CpuRanks(h) => Some(h),
            _ => None,
        }
    }
}

impl TensorStore for CudaBackend {
    fn bufs(data: &TensorData) -> Option<&[Self::Buf]> {
        match data {
            TensorData::Cuda(b) => Some(b),
            _ => None,
        }
    }
    fn wrap(bufs: Vec<Self::Buf>) -> TensorData {
        TensorData::Cuda(bufs)
    }
    fn ranked(data: &TensorData) -> Option<&[RankHeld<Self::Buf>]> {
        match data {
            TensorData::CudaRanks(h) => Some(h),
            _ => None,
        }
    }
    fn wrap_ranked(held: Vec<RankHeld<Self::Buf>>) -> TensorData {
        TensorData::CudaRanks(held)
    }
    fn into_ranked(data: TensorData) -> Option<Vec<RankHeld<Self::Buf>>> {
        match data {
            TensorData::CudaRanks(h) => Some(h),
            _ => None,
        }
    }
}

/// A plan with its workspace on one backend.
struct Prepared<B: Backend> {
    plan: Arc<Plan>,
    workspace: Mutex<Workspace<B>>,
    /// Its runs recorded as CUDA graphs, by their tensors.
    recorded: Recorded<B>,
    /// A partitioned plan's runs recorded as a CUDA graph per rank, by their buffers.
    ranks_recorded: crate::ranks::RankRecorded<B>,
}

/// A backend with its plan cache.
/// Prepared plans by the hash of their program, sizes and configuration and the hash of the
/// CSR inputs' entry counts.
type PlanCache<B> = HashMap<(u64, u64), Arc<Prepared<B>>>;

struct Engine<B: Backend> {
    backend: B,
    /// Prepared plans by (program, sizes and configuration; the CSR inputs' entry counts).
    plans: Mutex<PlanCache<B>>,
    /// The ranks beyond the engine's own backend, for partitioned plans.
    ranks: RankBackends<B>,
}

/// Where the ranks of a partitioned plan run: rank 0 on the engine's backend, the others on
/// backends of their own (several GPUs) or, where there are none, on the engine's backend too
/// (the in-process CPU ranks).
struct RankBackends<B: Backend> {
    /// The backends of ranks 1, 2, ...
    others: Vec<B>,
    /// Their collectives; `None`: through host memory ([`InMemory`]).
    collectives: Option<Box<dyn Collectives<B> + Send + Sync>>,
    /// In a run over several processes: this process's rank (on the engine's backend) and
    /// the channel to the others.
    world: Option<(usize, Arc<HostChannel>)>,
    /// The buffers partitioned runs keep for the next run (see [`crate::ranks::spares`]).
    spares: SpareBuffers<B::Buf>,
}

impl<B: Backend> RankBackends<B> {
    /// Every rank on the engine's backend, exchanging through host memory.
    fn shared() -> Self {
        RankBackends {
            others: Vec::new(),
            collectives: None,
            world: None,
            spares: SpareBuffers::new(),
        }
    }
}

impl<B: Backend> Engine<B> {
    fn new(backend: B) -> Self {
        Engine {
            backend,
            plans: Mutex::default(),
            ranks: RankBackends::shared(),
        }
    }

    /// The backends of `ranks` ranks, rank `r`'s at `r`.
    fn rank_backends(&self, ranks: usize) -> Result<Vec<&B>, RuntimeError> {
        // Ranks of other processes hold nothing here: the engine's backend stands in.
        if self.ranks.others.is_empty() || self.ranks.world.is_some() {
            return Ok(vec![&self.backend; ranks]);
        }
        if ranks != self.ranks.others.len() + 1 {
            return Err(RuntimeError::InvalidData(format!(
                "a plan partitioned over {ranks} ranks on a context of {} devices",
                self.ranks.others.len() + 1
            )));
        }
        Ok(std::iter::once(&self.backend)
            .chain(self.ranks.others.iter())
            .collect())
    }

    /// The ranks of a plan over `ranks` ranks that this process runs, each with its backend:
    /// every rank, or this process's one in a run over several processes.
    fn local_ranks(&self, ranks: usize) -> Result<Vec<(usize, &B)>, RuntimeError> {
        Ok(match &self.ranks.world {
            Some((rank, _)) => vec![(*rank, &self.backend)],
            None => self.rank_backends(ranks)?.into_iter().enumerate().collect(),
        })
    }

    /// The collectives between its ranks.
    fn collectives(&self) -> &dyn Collectives<B> {
        match &self.ranks.collectives {
            Some(c) => c.as_ref(),
            None => &InMemory,
        }
    }

    /// A ranked tensor's values on the host.
    fn ranked_to_host(
        &self,
        held: &[RankHeld<B::Buf>],
        shape: TensorShape,
    ) -> Result<HostVec, RuntimeError> {
        match &self.ranks.world {
            Some((rank, channel)) => {
                ranked::to_host_in_world(&self.backend, held, shape, *rank, channel)
            }
            None => ranked::to_host(&self.rank_backends(held.len())?, held, shape),
        }
    }
}

impl<B: Backend> Drop for Engine<B> {
    /// The plans go before the backend: their recorded CUDA graphs launch the backend's
    /// kernels, whose modules the backend unloads when it goes, so the graphs are destroyed
    /// first, after the queued work (which may be a graph still running) has finished.
    fn drop(&mut self) {
        // An error here was reported by the run that caused it; dropping goes on regardless.
        let _ = self.backend.synchronize();
        for other in &self.ranks.others {
            let _ = other.synchronize();
        }
        match self.plans.get_mut() {
            Ok(plans) => plans.clear(),
            Err(poisoned) => poisoned.into_inner().clear(),
        }
        // The ranks' communicators go after the plans (NCCL waits, in destroying a
        // communicator, for every graph holding its collectives to be destroyed: the plans'
        // recorded partitioned runs) and while every device is still there.
        self.ranks.collectives = None;
    }
}

/// The backend in use. One per context and never moved, so the variants' difference in size
/// does not matter.
#[allow(clippy::large_enum_variant)]
enum EngineKind {
    Cpu(Engine<CpuBackend>),
    Cuda(Engine<CudaBackend>),
}

/// Runs `$body` with `$e` bound to the context's engine, whatever its backend.
macro_rules! with_engine {
    ($self:expr, $e:ident => $body:expr) => {
        match &$self.engine {
            EngineKind::Cpu($e) => $body,
            EngineKind::Cuda($e) => $body,
        }
    };
}

/// Where programs run, and the tensors they run on.
///
/// ```
/// use popcorn_runtime::{Args, Context, DeviceSpec};
/// let ctx = Context::new(DeviceSpec::Cpu).unwrap();
/// let p = popcorn_dsl::Program::parse(
///     "fn axpy(x: Col[n], y: Col[n], a: Scalar) -> (z: Col[n]) { z = a * x + y; }",
/// ).unwrap();
/// let x = ctx.col(&[1.0, 2.0, 3.0]).unwrap();
/// let y = ctx.col(&[10.0, 20.0, 30.0]).unwrap();
/// let out = ctx.run(&p, &Args::new().tensor("x", &x).tensor("y", &y).scalar("a", 2.0)).unwrap();
/// assert_eq!(ctx.to_f64(out.tensor("z").unwrap()).unwrap(), vec![12.0, 24.0, 36.0]);
/// ```
pub struct Context {
    engine: EngineKind,
    config: PlannerConfig,
    /// Plans are made for this machine instead of the backend's own target.
    target: Option<popcorn_dsl::Target>,
    /// Runs may be recorded and replayed as CUDA graphs ([`Context::with_graphs`]).
    graphs: bool,
    /// The most memory [`Context::memory_info`] reports free ([`Context::with_memory_budget`]).
    memory_budget: Option<u64>,
}

fn dense_arg<'a, B>(bufs: &'a [B], shape: TensorShape) -> Arg<'a, B> {
    match shape {
        TensorShape::Dense { rows, cols } => Arg::Dense {
            buf: &bufs[0],
            rows,
            cols,
        },
        TensorShape::Index { len } => Arg::Index { buf: &bufs[0], len },
        TensorShape::Csr { rows, cols, nnz } => Arg::Csr {
            row_ptr: &bufs[0],
            col_idx: &bufs[1],
            values: &bufs[2],
            rows,
            cols,
            nnz,
        },
    }
}

/// The planner configuration of a CPU context: [`PlannerConfig::from_env`], partitioned over
/// the points under `POPCORN_CPU_RANKS=P` (P > 1; run by [`crate::ranks`] with in-memory
/// collectives).
fn cpu_config() -> PlannerConfig {
    let mut config = PlannerConfig::from_env();
    config.partition = popcorn_dsl::settings::settings()
        .cpu_ranks
        .filter(|p| *p > 1)
        .map(PartitionSpec::points);
    config
}

impl Context {
    /// A context on the given device, computing in `f32`.
    pub fn new(device: DeviceSpec) -> Result<Context, RuntimeError> {
        if let Some(world) = World::from_env()? {
            return Context::in_world(device, &world);
        }
        let engine = match device.resolve()? {
            DeviceSpec::Cuda(n) => EngineKind::Cuda(Engine::new(CudaBackend::new(n)?)),
            spec @ DeviceSpec::CudaSet(_) => return Context::cuda_ranks(&spec.ordinals()),
            _ => EngineKind::Cpu(Engine::new(CpuBackend::new())),
        };
        let config = match engine {
            EngineKind::Cpu(_) => cpu_config(),
            _ => PlannerConfig::from_env(),
        };
        Ok(Context {
            engine,
            config,
            target: None,
            graphs: !popcorn_dsl::settings::settings().no_graphs,
            memory_budget: None,
        })
    }

    /// A context over several GPUs of this host driven by this process, one rank per device
    /// (in the order given): its plans are partitioned along the points (`n`) over the
    /// devices, which exchange through NCCL, and the values held in rows (a kernel matrix)
    /// stay on their ranks between runs. One ordinal gives an ordinary one-GPU context.
    pub fn cuda_ranks(ordinals: &[usize]) -> Result<Context, RuntimeError> {
        let [first, rest @ ..] = ordinals else {
            return Err(RuntimeError::Device("no GPU was named".into()));
        };
        if rest.is_empty() {
            return Context::new(DeviceSpec::Cuda(*first));
        }
        let backends = ordinals
            .iter()
            .map(|&o| CudaBackend::new(o))
            .collect::<Result<Vec<_>, _>>()?;
        let nccl = crate::cuda::NcclRanks::new(&backends.iter().collect::<Vec<_>>())?;
        let mut backends = backends.into_iter();
        let home = backends
            .next()
            .ok_or_else(|| RuntimeError::Device("no GPU".into()))?;
        let mut engine = Engine::new(home);
        engine.ranks = RankBackends {
            others: backends.collect(),
            collectives: Some(Box::new(nccl)),
            world: None,
            spares: SpareBuffers::new(),
        };
        let mut config = PlannerConfig::from_env();
        config.partition = Some(PartitionSpec::points(ordinals.len()));
        Ok(Context {
            engine: EngineKind::Cuda(engine),
            config,
            target: None,
            graphs: !popcorn_dsl::settings::settings().no_graphs,
            memory_budget: None,
        })
    }

    /// A context for this process's rank of a run spread over several processes (started by
    /// `mpirun`, `srun` or `torchrun`; [`World::from_env`] reads the launcher's environment,
    /// and [`Context::new`] calls this when it finds one): plans are partitioned along the
    /// points over the processes, this one running its rank on the CPU or on the GPU
    /// `cuda:{local rank}` (with `cuda`, `cuda:0` or `auto`; `cuda:N`, N > 0, names another),
    /// and the ranks exchange
    /// through NCCL (GPUs) or the host channel (CPUs). Every process must run the same programs
    /// in the same order, and read back tensors held in rows at the same points.
    pub fn in_world(device: DeviceSpec, world: &World) -> Result<Context, RuntimeError> {
        let channel = crate::ranks::world::process_channel(world)?;
        let mut config = PlannerConfig::from_env();
        config.partition = Some(PartitionSpec::points(world.size));
        // `cuda` (which is `cuda:0`) and `auto` mean this process's own GPU, `cuda:{local
        // rank}` (the first visible one where the launcher gives each process one GPU).
        let gpu = match device {
            DeviceSpec::Cpu => None,
            DeviceSpec::Cuda(n) if n > 0 => Some(n),
            DeviceSpec::Cuda(_) | DeviceSpec::Auto | DeviceSpec::CudaAll => {
                match crate::cuda::cuda_available() {
                    Ok(count) if count > 0 => Some(world.local_rank % count),
                    _ if device == DeviceSpec::Auto => None,
                    Ok(_) | Err(_) => {
                        return Err(RuntimeError::Device(format!(
                            "{device} was requested but no GPU is usable here"
                        )))
                    }
                }
            }
            DeviceSpec::CudaSet(_) => {
                return Err(RuntimeError::Device(format!(
                    "{device} names several GPUs, but this process is rank {} of {} processes \
                     (one GPU each): use cuda or cuda:N",
                    world.rank, world.size
                )))
            }
        };
        let engine = match gpu {
            None => {
                let mut engine = Engine::new(CpuBackend::new());
                engine.ranks.collectives = Some(Box::new(WorldCollectives::new(channel.clone())));
                engine.ranks.world = Some((world.rank, channel));
                EngineKind::Cpu(engine)
            }
            Some(n) => {
                let backend = CudaBackend::new(n)?;
                let nccl =
                    crate::cuda::NcclRanks::for_rank(&backend, world.rank, world.size, &channel)?;
                let mut engine = Engine::new(backend);
                engine.ranks.collectives = Some(Box::new(nccl));
                engine.ranks.world = Some((world.rank, channel));
                EngineKind::Cuda(engine)
            }
        };
        Ok(Context {
            engine,
            config,
            target: None,
            graphs: false,
            memory_budget: None,
        })
    }

    /// A CPU context of `ranks` in-process ranks, each on a CPU backend of its own whose
    /// buffers may take at most `memory_limit` bytes (none: what the system has): its plans
    /// are partitioned along the points as on several GPUs, which lets a test show that a
    /// value held in rows is never whole on any rank.
    pub fn cpu_ranks(ranks: usize, memory_limit: Option<u64>) -> Context {
        let mut engine = Engine::new(CpuBackend::with_memory_limit(memory_limit));
        engine.ranks.others = (1..ranks)
            .map(|_| CpuBackend::with_memory_limit(memory_limit))
            .collect();
        let mut config = PlannerConfig::from_env();
        config.partition = Some(PartitionSpec::points(ranks));
        Context {
            engine: EngineKind::Cpu(engine),
            config,
            target: None,
            graphs: false,
            memory_budget: None,
        }
    }

    /// A context on the CPU whose buffers may take at most `bytes` of host memory (as
    /// `POPCORN_MEMORY_LIMIT` does for every CPU context): plans that need more are refused
    /// with [`RuntimeError::OutOfMemory`] before anything is allocated.
    pub fn cpu_with_memory_limit(bytes: u64) -> Context {
        Context {
            engine: EngineKind::Cpu(Engine::new(CpuBackend::with_memory_limit(Some(bytes)))),
            config: cpu_config(),
            target: None,
            graphs: false,
            memory_budget: None,
        }
    }

    /// A context on the device named by `POPCORN_DEVICE` (`cpu`, `cuda`, `cuda:N`, `cuda:0,1`,
    /// `cuda:all`); without it,
    /// the first usable GPU, else the CPU (with a one-line notice on stderr).
    pub fn from_env() -> Result<Context, RuntimeError> {
        Context::new(DeviceSpec::from_env()?)
    }

    /// The same context computing in `dtype`.
    pub fn with_dtype(mut self, dtype: DType) -> Context {
        self.config.dtype = dtype;
        self
    }

    /// The same context with runs recorded and replayed as CUDA graphs (`on`, the default
    /// unless `POPCORN_NO_GRAPHS` is set) or always queued step by step: from the third run
    /// of a plan with the same tensors, scalars and sizes, a GPU context launches the run's
    /// kernels as one graph recorded at the second (plans of popcorn's own kernels; see
    /// [`Context::replayed_runs`]). Results are those of the runs step by step.
    pub fn with_graphs(mut self, on: bool) -> Context {
        self.graphs = on;
        self
    }

    /// How many runs so far replayed a recorded CUDA graph (0 on the CPU).
    pub fn replayed_runs(&self) -> u64 {
        with_engine!(self, e => e
            .plans
            .lock()
            .map(|plans| plans
                .values()
                .map(|p| p.recorded.replays() + p.ranks_recorded.replays())
                .sum())
            .unwrap_or(0))
    }

    /// The same context with another planner configuration (its dtype included).
    pub fn with_config(mut self, config: PlannerConfig) -> Context {
        self.config = config;
        self
    }

    /// Changes the planner configuration in place (plans are cached by configuration, so
    /// plans made under each one stay available): one context, hence one set of tensors, can
    /// compare configurations.
    pub fn set_config(&mut self, config: PlannerConfig) {
        self.config = config;
    }

    /// The same context making its plans for `target` instead of its backend's own: plans are
    /// portable, so a plan made for the reference GPU runs on the CPU backend (tests use this
    /// to run GPU plans against the reference on any machine). Forgets the plans made so far.
    pub fn with_target(mut self, target: popcorn_dsl::Target) -> Context {
        self.target = Some(target);
        with_engine!(&self, e => {
            if let Ok(mut plans) = e.plans.lock() {
                plans.clear();
            }
        });
        self
    }

    /// The planner configuration.
    pub fn config(&self) -> &PlannerConfig {
        &self.config
    }

    /// Element type of computations.
    pub fn dtype(&self) -> DType {
        self.config.dtype
    }

    /// Whether the context runs on a GPU.
    pub fn is_gpu(&self) -> bool {
        matches!(self.engine, EngineKind::Cuda(_))
    }

    /// The CUDA backend, when the context runs on a GPU (for baselines and benchmarks that
    /// use its raw API beside popcorn's plans).
    pub fn cuda_backend(&self) -> Option<&CudaBackend> {
        match &self.engine {
            EngineKind::Cuda(e) => Some(&e.backend),
            EngineKind::Cpu(_) => None,
        }
    }

    /// What the planner assumes about this context's device (or the target it was given).
    pub fn target(&self) -> popcorn_dsl::Target {
        match &self.target {
            Some(t) => t.clone(),
            None => with_engine!(self, e => e.backend.target()),
        }
    }

    /// The device, in words; for a context of several in-process ranks, every rank's device
    /// (`cuda:0 ... + cuda:1 ...`), or one of them and the count where they are all alike
    /// (`cpu (2 threads) x 3 ranks`).
    pub fn describe(&self) -> String {
        let devices: Vec<String> = with_engine!(self, e => std::iter::once(&e.backend)
            .chain(e.ranks.others.iter())
            .map(|b| b.describe())
            .collect());
        match devices.as_slice() {
            [one] => one.clone(),
            [first, rest @ ..] if rest.iter().all(|d| d == first) => {
                format!("{first} x {} ranks", devices.len())
            }
            _ => devices.join(" + "),
        }
    }

    /// Waits for queued work and reports asynchronous errors.
    pub fn synchronize(&self) -> Result<(), RuntimeError> {
        with_engine!(self, e => {
            e.backend.synchronize()?;
            e.ranks.others.iter().try_for_each(|b| b.synchronize())
        })
    }

    /// Pays the one-time setup of the device's product library now, on every rank: cuBLAS
    /// sets itself up at its first product (0.1-0.2 s on an H100), which would otherwise count
    /// in the time of the first program that multiplies. Callers that time their phases (a
    /// Kernel K-means fit) call it while they set up; after the first call it returns at once.
    /// Nothing to do on the CPU.
    pub fn prepare_products(&self) -> Result<(), RuntimeError> {
        with_engine!(self, e => {
            e.backend.prepare_products()?;
            e.ranks.others.iter().try_for_each(|b| b.prepare_products())
        })
    }

    /// Free and total memory in bytes: the GPU's, or on the CPU the host memory its buffers
    /// may still take (`None` where unknown); free at most the context's memory budget
    /// ([`Context::with_memory_budget`]).
    pub fn memory_info(&self) -> Option<(usize, usize)> {
        let info = with_engine!(self, e => e.backend.memory_info());
        let Some(budget) = self.memory_budget else {
            return info;
        };
        let budget = usize::try_from(budget).unwrap_or(usize::MAX);
        Some(match info {
            Some((free, total)) => (free.min(budget), total),
            None => (budget, budget),
        })
    }

    /// The same context counting at most `bytes` as free in [`Context::memory_info`] (`None`:
    /// what the device has): the choices made from it (Kernel K-means' algorithm and block
    /// sizes) stay within the budget. It is a budget for planning; a GPU's allocations are
    /// not capped by it (`POPCORN_MEMORY_LIMIT` caps a CPU context's buffers).
    ///
    /// ```
    /// use popcorn_runtime::{Context, DeviceSpec};
    /// let ctx = Context::new(DeviceSpec::Cpu).unwrap().with_memory_budget(Some(1 << 20));
    /// assert!(ctx.memory_info().unwrap().0 <= 1 << 20);
    /// ```
    pub fn with_memory_budget(mut self, bytes: Option<u64>) -> Context {
        self.memory_budget = bytes;
        self
    }

    /// The memory budget ([`Context::with_memory_budget`]), if any.
    pub fn memory_budget(&self) -> Option<u64> {
        self.memory_budget
    }

    /// Runs `f` and returns its value with the milliseconds between a mark before and a mark
    /// after it (CUDA events on the backend's stream on a GPU, the host clock on the CPU),
    /// waiting for the work `f` queued to finish. Work queued before the call is not counted;
    /// time the GPU spends idle while the host prepares `f`'s work (planning on first use,
    /// kernel compiles, read-backs inside `f`) is.
    ///
    /// ```
    /// use popcorn_runtime::{Context, DeviceSpec};
    /// let ctx = Context::new(DeviceSpec::Cpu).unwrap();
    /// let (x, ms) = ctx.time(|| ctx.col(&[1.0, 2.0])).unwrap();
    /// assert_eq!(ctx.to_f64(&x).unwrap(), vec![1.0, 2.0]);
    /// assert!(ms >= 0.0);
    /// ```
    pub fn time<T>(
        &self,
        f: impl FnOnce() -> Result<T, RuntimeError>,
    ) -> Result<(T, f64), RuntimeError> {
        with_engine!(self, e => {
            let start = e.backend.mark()?;
            let value = f()?;
            let end = e.backend.mark()?;
            let ms = e.backend.elapsed_ms(&start, &end)?;
            Ok((value, ms))
        })
    }

    fn float_upload(&self, data: &[f64]) -> HostVec {
        match self.config.dtype {
            DType::F32 => HostVec::F32(data.iter().map(|v| *v as f32).collect()),
            DType::F64 => HostVec::F64(data.to_vec()),
        }
    }

    fn make(
        &self,
        shape: TensorShape,
        elem: ElemType,
        parts: &[HostSlice<'_>],
    ) -> Result<Tensor, RuntimeError> {
        let data = with_engine!(self, e => {
            let bufs = parts.iter().map(|p| e.backend.upload(*p)).collect::<Result<Vec<_>, _>>()?;
            wrap_for(&e.backend, bufs)
        });
        Ok(Tensor::new(shape, elem, data))
    }

    /// A dense `rows x cols` matrix from row-major values (converted to the context's dtype).
    pub fn dense(&self, rows: usize, cols: usize, values: &[f64]) -> Result<Tensor, RuntimeError> {
        matrix_values(rows, cols, values.len())?;
        let host = self.float_upload(values);
        self.make(
            TensorShape::Dense { rows, cols },
            ElemType::float(self.config.dtype),
            &[host.as_slice()],
        )
    }

    /// A dense `rows x cols` matrix read block by block: on a context whose plans run
    /// partitioned along the points (several GPUs, CPU ranks, one rank per process), each
    /// rank of this process asks `read` for only its block of rows (`read(range)` returns
    /// those rows' values, row-major) and holds it, so a large matrix (a precomputed kernel
    /// matrix) is never read or held whole by any process; elsewhere `read(0..rows)` once.
    /// The blocks are those the plans' partition gives the ranks.
    pub fn dense_rows(
        &self,
        rows: usize,
        cols: usize,
        read: &mut dyn FnMut(std::ops::Range<usize>) -> Result<Vec<f64>, RuntimeError>,
    ) -> Result<Tensor, RuntimeError> {
        let spec = match &self.config.partition {
            Some(spec) if spec.ranks > 1 => spec.clone(),
            _ => return self.dense(rows, cols, &read(0..rows)?),
        };
        let elem = ElemType::float(self.config.dtype);
        let data = with_engine!(self, e => {
            let mut held: Vec<RankHeld<_>> = (0..spec.ranks)
                .map(|r| RankHeld {
                    whole: None,
                    rows: None,
                    row_count: spec.rows(rows, r).len(),
                })
                .collect();
            for (r, backend) in e.local_ranks(spec.ranks)? {
                let block = spec.rows(rows, r);
                let values = read(block.clone())?;
                matrix_values(block.len(), cols, values.len())?;
                held[r].rows = Some(vec![backend.upload(self.float_upload(&values).as_slice())?]);
            }
            ranked_data_for(&e.backend, held)
        });
        Ok(Tensor::new(TensorShape::Dense { rows, cols }, elem, data))
    }

    /// A dense matrix from `f32` values, without a detour through `f64` when the context
    /// computes in `f32`.
    pub fn dense_f32(
        &self,
        rows: usize,
        cols: usize,
        values: &[f32],
    ) -> Result<Tensor, RuntimeError> {
        matrix_values(rows, cols, values.len())?;
        match self.config.dtype {
            DType::F32 => self.make(
                TensorShape::Dense { rows, cols },
                ElemType::F32,
                &[HostSlice::F32(values)],
            ),
            DType::F64 => {
                let v: Vec<f64> = values.iter().map(|x| *x as f64).collect();
                self.dense(rows, cols, &v)
            }
        }
    }

    /// A dense `rows x cols` matrix held in 16 bits: the row-major values rounded to `half`
    /// (to nearest even), for plans that hold a parameter in that format
    /// ([`PlannerConfig::half_storage`](popcorn_dsl::PlannerConfig)).
    pub fn dense_half(
        &self,
        rows: usize,
        cols: usize,
        values: &[f64],
        half: kernel_ir::Half,
    ) -> Result<Tensor, RuntimeError> {
        matrix_values(rows, cols, values.len())?;
        let bits: Vec<u16> = values
            .iter()
            .map(|v| to_half_bits(half, *v as f32))
            .collect();
        self.make(
            TensorShape::Dense { rows, cols },
            ElemType::Half(half),
            &[HostSlice::Half(half, &bits)],
        )
    }

    /// A column vector.
    pub fn col(&self, values: &[f64]) -> Result<Tensor, RuntimeError> {
        self.dense(values.len(), 1, values)
    }

    /// A row vector.
    pub fn row(&self, values: &[f64]) -> Result<Tensor, RuntimeError> {
        self.dense(1, values.len(), values)
    }

    /// An index vector (cluster labels).
    pub fn index(&self, values: &[u32]) -> Result<Tensor, RuntimeError> {
        self.make(
            TensorShape::Index { len: values.len() },
            ElemType::U32,
            &[HostSlice::U32(values)],
        )
    }

    /// A CSR matrix, checked: `row_ptr` has `rows + 1` non-decreasing offsets from 0 to
    /// `nnz`, every column index is below `cols`.
    pub fn csr(
        &self,
        rows: usize,
        cols: usize,
        row_ptr: &[i32],
        col_idx: &[i32],
        values: &[f64],
    ) -> Result<Tensor, RuntimeError> {
        let bad = |m: String| {
            Err(RuntimeError::InvalidData(format!(
                "CSR {rows} x {cols}: {m}"
            )))
        };
        if row_ptr.len() != rows + 1 {
            return bad(format!(
                "row_ptr has {} entries, expected rows + 1 = {}",
                row_ptr.len(),
                rows + 1
            ));
        }
        if col_idx.len() != values.len() {
            return bad(format!(
                "{} column indices but {} values",
                col_idx.len(),
                values.len()
            ));
        }
        if row_ptr[0] != 0 || row_ptr[rows] as usize != values.len() {
            return bad(format!("row_ptr must run from 0 to nnz = {}", values.len()));
        }
        if let Some(r) = row_ptr.windows(2).position(|w| w[1] < w[0]) {
            return bad(format!("row_ptr decreases at row {r}"));
        }
        if let Some(p) = col_idx.iter().position(|c| *c < 0 || *c as usize >= cols) {
            return bad(format!(
                "column index {} at entry {p} is out of range",
                col_idx[p]
            ));
        }
        let vals = self.float_upload(values);
        self.make(
            TensorShape::Csr {
                rows,
                cols,
                nnz: values.len(),
            },
            ElemType::float(self.config.dtype),
            &[
                HostSlice::I32(row_ptr),
                HostSlice::I32(col_idx),
                vals.as_slice(),
            ],
        )
    }

    fn download(&self, t: &Tensor, part: usize) -> Result<HostVec, RuntimeError> {
        with_engine!(self, e => {
            if let Some(held) = ranked_of(&e.backend, &t.data) {
                return e.ranked_to_host(held, t.shape);
            }
            let bufs = bufs_for(&e.backend, &t.data)?;
            e.backend.download(&bufs[part])
        })
    }

    /// Writes `host` (a whole dense or index tensor's values) into `t`.
    fn write_host(&self, t: &Tensor, host: HostVec) -> Result<(), RuntimeError> {
        t.forget_copies();
        with_engine!(self, e => {
            if let Some(held) = ranked_of(&e.backend, &t.data) {
                return ranked::write(&e.rank_backends(held.len())?, held, t.shape, &host);
            }
            e.backend.write(&bufs_for(&e.backend, &t.data)?[0], host.as_slice())
        })
    }

    /// The values of a dense tensor (or of a CSR tensor's entries, or an index vector) as f64.
    pub fn to_f64(&self, t: &Tensor) -> Result<Vec<f64>, RuntimeError> {
        let part = if matches!(t.shape, TensorShape::Csr { .. }) {
            2
        } else {
            0
        };
        Ok(self.download(t, part)?.to_f64())
    }

    /// The entries of an index vector.
    pub fn to_u32(&self, t: &Tensor) -> Result<Vec<u32>, RuntimeError> {
        match self.download(t, 0)? {
            HostVec::U32(v) => Ok(v),
            other => Err(RuntimeError::Binding(format!(
                "expected an index vector, found {:?} data",
                other.as_slice().elem()
            ))),
        }
    }

    /// Overwrites a dense tensor's values (same length), converting to its element type.
    pub fn write_f64(&self, t: &Tensor, values: &[f64]) -> Result<(), RuntimeError> {
        if values.len() != t.len() || matches!(t.shape, TensorShape::Csr { .. }) {
            return Err(RuntimeError::InvalidData(format!(
                "cannot write {} values into a {}",
                values.len(),
                t.shape
            )));
        }
        let host = match t.elem {
            ElemType::F32 => HostVec::F32(values.iter().map(|v| *v as f32).collect()),
            ElemType::F64 => HostVec::F64(values.to_vec()),
            ElemType::U32 => HostVec::U32(values.iter().map(|v| *v as u32).collect()),
            ElemType::I32 => HostVec::I32(values.iter().map(|v| *v as i32).collect()),
            ElemType::Half(h) => HostVec::Half(
                h,
                values.iter().map(|v| to_half_bits(h, *v as f32)).collect(),
            ),
        };
        self.write_host(t, host)
    }

    /// Overwrites an index vector's entries (same length).
    pub fn write_u32(&self, t: &Tensor, values: &[u32]) -> Result<(), RuntimeError> {
        if values.len() != t.len() || t.elem != ElemType::U32 {
            return Err(RuntimeError::InvalidData(format!(
                "cannot write {} indices into a {}",
                values.len(),
                t.shape
            )));
        }
        self.write_host(t, HostVec::U32(values.to_vec()))
    }

    /// Sets every stored element of a tensor to `value` (NaN to poison outputs in tests).
    pub fn fill(&self, t: &Tensor, value: f64) -> Result<(), RuntimeError> {
        t.forget_copies();
        with_engine!(self, e => {
            if let Some(held) = ranked_of(&e.backend, &t.data) {
                return ranked::fill(&e.rank_backends(held.len())?, held, value);
            }
            for b in bufs_for(&e.backend, &t.data)? {
                e.backend.fill(b, value)?;
            }
            Ok(())
        })
    }

    /// The plan for `program` at the sizes in `dims` (cached), without running it. CSR inputs
    /// count as dense (no entry counts): [`Context::plan_for`] plans for actual arguments.
    pub fn plan(&self, program: &Program, dims: &DimBindings) -> Result<Arc<Plan>, RuntimeError> {
        with_engine!(self, e => Ok(self.prepare(e, program, dims, &BTreeMap::new())?.plan.clone()))
    }

    /// The plan a run of `program` with `args` uses (cached), without running it: the sizes
    /// and the CSR inputs' entry counts come from the arguments.
    pub fn plan_for(&self, program: &Program, args: &Args<'_>) -> Result<Arc<Plan>, RuntimeError> {
        let (dims, _, nnz) = bind(program, args)?;
        with_engine!(self, e => Ok(self.prepare(e, program, &dims, &nnz)?.plan.clone()))
    }

    fn prepare<B: TensorStore>(
        &self,
        engine: &Engine<B>,
        program: &Program,
        dims: &DimBindings,
        nnz: &BTreeMap<String, usize>,
    ) -> Result<Arc<Prepared<B>>, RuntimeError> {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        program.fingerprint.hash(&mut h);
        dims.hash(&mut h);
        self.config.hash(&mut h);
        let shape_key = h.finish();
        // The CSR inputs' entry counts: the sparse products' choice and the sizes of CSR
        // temporaries depend on them, so a plan is reused only for the same counts.
        let mut h = std::collections::hash_map::DefaultHasher::new();
        nnz.hash(&mut h);
        let key = (shape_key, h.finish());
        let mut plans = engine
            .plans
            .lock()
            .map_err(|_| RuntimeError::Device("plan cache lock poisoned".into()))?;
        if let Some(p) = plans.get(&key) {
            return Ok(p.clone());
        }
        // Sparse inputs of ever new entry counts (predictions batch by batch) must not pile up
        // plans and workspaces: forget those of this program and sizes that no run holds.
        plans.retain(|(s, _), p| *s != shape_key || Arc::strong_count(p) > 1);
        let plan = popcorn_dsl::plan(program, dims, &self.config, &self.target(), nnz)?;
        crate::dump::dump_plan(&plan);
        if let Some((mut free, mut total)) = engine.backend.memory_info() {
            let outputs: usize = plan
                .outputs
                .iter()
                .map(|(_, v)| {
                    let v = plan.value(*v);
                    match v.kind {
                        ValueKind::Dense => v.len() * v.elem_bytes(self.config.dtype),
                        ValueKind::Index => v.rows * 4,
                        _ => 0,
                    }
                })
                .sum();
            // A partitioned plan's ranks allocate their own buffers (rank 0's, the largest
            // block, here); the plan keeps no workspace.
            let needed = match &plan.partition {
                Some(part) => crate::ranks::rank_bytes(&plan, part, 0),
                None => plan.workspace_bytes() + outputs,
            };
            if needed > free {
                // Before refusing: forget the workspaces of cached plans no run holds, and let
                // the backend hand back memory freed but kept for reuse.
                plans.retain(|_, p| Arc::strong_count(p) > 1);
                engine.ranks.spares.clear();
                engine.backend.release_memory()?;
                if let Some((f, t)) = engine.backend.memory_info() {
                    (free, total) = (f, t);
                }
            }
            if needed > free {
                let mib = |b: usize| b / (1 << 20);
                let (memory, hint) = match self.target().kind {
                    TargetKind::Cpu => ("host memory", crate::host_memory::HINT),
                    TargetKind::Cuda => (
                        "GPU memory",
                        "use a smaller problem, f32 instead of f64, free other GPU memory, or run on the CPU (POPCORN_DEVICE=cpu)",
                    ),
                };
                return Err(RuntimeError::OutOfMemory {
                    memory,
                    needed_mib: mib(needed).max(1),
                    what: format!("workspace and outputs of `{}`", program.name),
                    free_mib: mib(free),
                    total_mib: mib(total),
                    hint: hint.into(),
                });
            }
        }
        let workspace = if plan.partition.is_some() {
            // Checked once here: its runs skip the check (`ranks::run_ranked_local`).
            plan.validate()?;
            Workspace::empty()
        } else {
            Workspace::allocate(&engine.backend, &plan)?
        };
        let prepared = Arc::new(Prepared {
            plan: Arc::new(plan),
            workspace: Mutex::new(workspace),
            recorded: Recorded::default(),
            ranks_recorded: Default::default(),
        });
        plans.insert(key, prepared.clone());
        Ok(prepared)
    }

    /// Runs `program` with `args`, allocating its outputs.
    pub fn run(&self, program: &Program, args: &Args<'_>) -> Result<Outputs, RuntimeError> {
        let mut out = Outputs::default();
        self.run_into(program, args, &mut out)?;
        Ok(out)
    }

    /// Runs `program` with `args`, writing into the tensors already in `outputs` where their
    /// shapes fit (allocating the others): a loop that passes the same `Outputs` every time
    /// allocates nothing after its first call.
    pub fn run_into(
        &self,
        program: &Program,
        args: &Args<'_>,
        outputs: &mut Outputs,
    ) -> Result<(), RuntimeError> {
        let (dims, scalars, nnz) = bind(program, args)?;
        with_engine!(self, e => self.run_on(e, program, args, outputs, &dims, &scalars, &nnz))
    }

    #[allow(clippy::too_many_arguments)]
    fn run_on<B: TensorStore>(
        &self,
        engine: &Engine<B>,
        program: &Program,
        args: &Args<'_>,
        outputs: &mut Outputs,
        dims: &DimBindings,
        scalars: &ScalarBindings,
        nnz: &BTreeMap<String, usize>,
    ) -> Result<(), RuntimeError> {
        let started = std::time::Instant::now();
        let prepared = self.prepare(engine, program, dims, nnz)?;
        let prepared_ms = started.elapsed().as_secs_f64() * 1e3;
        let plan = &prepared.plan;
        let b = &engine.backend;
        // Dense inputs hold the element type the plan reads (16 bits where it holds them so).
        for (name, id) in &plan.inputs {
            let v = plan.value(*id);
            let Some((_, t)) = args.tensors.iter().find(|(n, _)| n == name) else {
                continue;
            };
            let want = ElemType::dense(plan.dtype, v.held);
            if v.kind == ValueKind::Dense && t.elem != want {
                return Err(RuntimeError::Binding(format!(
                    "tensor `{name}` holds {} values, but the plan reads `{name}` as {}; pass a \
                     tensor of that type (Context::dense_half makes 16-bit ones) or plan with \
                     PlannerConfig::half_storage to match",
                    elem_name(t.elem),
                    elem_name(want)
                )));
            }
        }
        if plan.partition.is_some() {
            // Recorded where this process drives every rank (runs over processes, under
            // mpirun, go step by step).
            let recorded =
                (self.graphs && engine.ranks.world.is_none()).then_some(&prepared.ranks_recorded);
            return self.run_partitioned(
                engine, plan, program, args, outputs, dims, scalars, recorded,
            );
        }
        // Output tensors: reuse the caller's where the shape fits.
        let allocating = std::time::Instant::now();
        for (name, id) in &plan.outputs {
            let v = plan.value(*id);
            let Some((shape, elem)) = output_shape(plan, v) else {
                continue;
            };
            let fits = outputs
                .tensors
                .get(name)
                .is_some_and(|t| t.shape == shape && t.elem == elem && B::bufs(&t.data).is_some());
            if !fits {
                let buf = b.alloc(elem, v.len().max(1))?;
                outputs
                    .tensors
                    .insert(name.clone(), Tensor::new(shape, elem, B::wrap(vec![buf])));
            }
        }
        // A tensor the ranks of a partitioned run left behind, read by a plan that is not
        // partitioned: gathered whole onto the context's backend for this run.
        let mut gathered: Vec<(String, Vec<B::Buf>)> = Vec::new();
        for (name, t) in &args.tensors {
            if let Some(held) = B::ranked(&t.data) {
                let host = engine.ranked_to_host(held, t.shape)?;
                gathered.push((name.to_string(), vec![b.upload(host.as_slice())?]));
            }
        }
        let allocated_ms = allocating.elapsed().as_secs_f64() * 1e3;
        let mut ins: HashMap<String, Arg<'_, B::Buf>> = HashMap::new();
        for (name, t) in &args.tensors {
            let bufs = match gathered.iter().find(|(n, _)| n == name) {
                Some((_, bufs)) => &bufs[..],
                None => B::bufs(&t.data).ok_or_else(|| {
                    RuntimeError::Binding(format!(
                        "tensor `{name}` lives on another device than this context ({})",
                        b.describe()
                    ))
                })?,
            };
            ins.insert(name.to_string(), plain_arg(program, name, t.shape, bufs));
        }
        let mut outs: HashMap<String, Arg<'_, B::Buf>> = HashMap::new();
        for (name, t) in &outputs.tensors {
            if let Some(bufs) = B::bufs(&t.data) {
                outs.insert(name.clone(), dense_arg(bufs, t.shape));
            }
        }
        let running = std::time::Instant::now();
        {
            let ws = prepared
                .workspace
                .lock()
                .map_err(|_| RuntimeError::Device("workspace lock poisoned".into()))?;
            prepared
                .recorded
                .run(self.graphs, b, plan, &ws, &ins, &outs, scalars, dims)?;
        }
        if popcorn_dsl::settings::settings().log.time {
            // Where a run's wall time goes besides its steps' device time (printed above by
            // the executor): planning and the workspace on first use, the outputs'
            // allocation, and the run itself (kernel loads and compiles on first use, queueing,
            // the per-step waits of this mode).
            eprintln!(
                "[popcorn time] {} on the host: {prepared_ms:.3} ms preparing (plan, workspace), \
                 {allocated_ms:.3} ms allocating outputs, {:.3} ms running",
                plan.program,
                running.elapsed().as_secs_f64() * 1e3
            );
        }
        read_scalar_outputs(b, plan, program, outputs, scalars, dims)
    }

    /// Runs a partitioned plan over the context's ranks: tensors the ranks left behind are read
    /// where they lie, the others copied onto the ranks that need them, and the outputs stay
    /// on the ranks (a value held in rows, a kernel matrix, is never whole anywhere).
    #[allow(clippy::too_many_arguments)]
    fn run_partitioned<B: TensorStore>(
        &self,
        engine: &Engine<B>,
        plan: &Plan,
        program: &Program,
        args: &Args<'_>,
        outputs: &mut Outputs,
        dims: &DimBindings,
        scalars: &ScalarBindings,
        recorded: Option<&crate::ranks::RankRecorded<B>>,
    ) -> Result<(), RuntimeError> {
        let ranks = plan.partition.as_ref().map_or(1, |p| p.ranks());
        let local = engine.local_ranks(ranks)?;
        // A dense tensor of this process on a context of several devices: its whole copies on
        // the other ranks' devices, made once and kept with it (so the points are not copied
        // to every device at every iteration). The locks are held for the run.
        let several = !engine.ranks.others.is_empty() && engine.ranks.world.is_none();
        let mut copies = Vec::new();
        for (name, t) in &args.tensors {
            let dense = !matches!(t.shape, TensorShape::Csr { .. });
            if let (true, true, Some(bufs)) = (several, dense, B::bufs(&t.data)) {
                let mut cached = t.copies.lock().map_err(|_| {
                    RuntimeError::Internal(format!("tensor `{name}`'s copies are poisoned"))
                })?;
                if cached.is_none() {
                    let backends = engine.rank_backends(ranks)?;
                    *cached = Some(B::wrap_ranked(copies_on_ranks(&backends, bufs)?));
                }
                copies.push((*name, t.shape, bufs, cached));
            }
        }
        let mut ins: HashMap<String, RankInput<'_, B::Buf>> = HashMap::new();
        for (name, shape, home_bufs, cached) in &copies {
            let held = cached
                .as_ref()
                .and_then(|d| B::ranked(d))
                .ok_or_else(|| RuntimeError::Internal("a tensor's copies vanished".into()))?;
            // Rank 0 reads the tensor itself, every other rank its copy.
            let forms = held
                .iter()
                .map(|h| crate::ranks::RankForms {
                    whole: Some(plain_arg(
                        program,
                        name,
                        *shape,
                        h.whole.as_deref().unwrap_or(home_bufs),
                    )),
                    rows: None,
                })
                .collect();
            ins.insert(name.to_string(), RankInput::Ranked(forms));
        }
        for (name, t) in &args.tensors {
            if ins.contains_key(*name) {
                continue;
            }
            let input = match B::ranked(&t.data) {
                Some(held) => RankInput::Ranked(ranked::forms(held, t.shape)?),
                None => {
                    let bufs = bufs_for(&engine.backend, &t.data)?;
                    RankInput::Whole(plain_arg(program, name, t.shape, bufs))
                }
            };
            ins.insert(name.to_string(), input);
        }
        // Output tensors the ranks left in `outputs` (a loop that feeds its outputs back, as
        // Kernel K-means swaps its labels) are written again where they fit: the same
        // buffers run after run, as recorded runs need.
        let mut reuse = crate::ranks::RankedOutputs::new();
        for (name, id) in &plan.outputs {
            let Some((shape, elem)) = output_shape(plan, plan.value(*id)) else {
                continue;
            };
            let fits = outputs.tensors.get(name).is_some_and(|t| {
                t.shape == shape && t.elem == elem && B::ranked(&t.data).is_some()
            });
            if let (true, Some(t)) = (fits, outputs.tensors.remove(name)) {
                if let Some(held) = B::into_ranked(t.data) {
                    reuse.insert(name.clone(), held);
                }
            }
        }
        let with = crate::ranks::RunWith {
            collectives: engine.collectives(),
            scalars,
            dims,
            spares: &engine.ranks.spares,
            recorded,
        };
        let mut held = crate::ranks::run_ranked_local(&local, plan, &ins, &with, reuse)?;
        for (name, id) in &plan.outputs {
            let v = plan.value(*id);
            let (Some((shape, elem)), Some(h)) = (output_shape(plan, v), held.remove(name)) else {
                continue;
            };
            let data = B::wrap_ranked(h);
            outputs
                .tensors
                .insert(name.clone(), Tensor::new(shape, elem, data));
        }
        read_scalar_outputs(&engine.backend, plan, program, outputs, scalars, dims)
    }
}

/// Fills `outputs.scalars`: host expressions evaluated, 1 x 1 results read back (all at
/// once, from rank 0 where the ranks hold them).
fn read_scalar_outputs<B: TensorStore>(
    b: &B,
    plan: &Plan,
    program: &Program,
    outputs: &mut Outputs,
    scalars: &ScalarBindings,
    dims: &DimBindings,
) -> Result<(), RuntimeError> {
    // Scalar outputs: host expressions, or 1 x 1 results read back (all at once).
    outputs.scalars.clear();
    let mut read_back: Vec<(&String, &B::Buf)> = Vec::new();
    for (name, id) in &plan.outputs {
        let v = plan.value(*id);
        let declared_scalar = program
            .outputs
            .iter()
            .any(|o| &o.name == name && o.ty.is_scalar());
        match (&v.home, &v.kind) {
            (Home::Host, ValueKind::Scalar(e)) => {
                let x = e
                    .eval(scalars, dims)
                    .map_err(|e| RuntimeError::Binding(e.to_string()))?;
                outputs.scalars.insert(name.clone(), x);
            }
            _ if declared_scalar => {
                let t = &outputs.tensors[name];
                let buf = match (B::bufs(&t.data), B::ranked(&t.data)) {
                    (Some(bufs), _) => bufs.first(),
                    // This process's first rank holding it (over processes, its own).
                    (None, Some(held)) => held
                        .iter()
                        .find_map(|h| h.whole.as_ref().or(h.rows.as_ref()).and_then(|b| b.first())),
                    _ => None,
                };
                let buf = buf.ok_or_else(|| {
                    RuntimeError::Internal(format!("scalar output `{name}` has no buffer"))
                })?;
                read_back.push((name, buf));
            }
            _ => {}
        }
    }
    let bufs: Vec<&B::Buf> = read_back.iter().map(|(_, b)| *b).collect();
    let values = b.read_scalars(&bufs)?;
    let names = read_back.iter().map(|(n, _)| (*n).clone());
    outputs.scalars.extend(names.zip(values));
    Ok(())
}

/// Checks that `got` values fill a `rows x cols` matrix.
fn matrix_values(rows: usize, cols: usize, got: usize) -> Result<(), RuntimeError> {
    if got != rows * cols {
        return Err(RuntimeError::InvalidData(format!(
            "a {rows} x {cols} matrix needs {} values, got {got}",
            rows * cols
        )));
    }
    Ok(())
}

/// An element type as users write it (`f32`, `bf16`, ...).
fn elem_name(e: ElemType) -> String {
    match e {
        ElemType::F32 => "f32".into(),
        ElemType::F64 => "f64".into(),
        ElemType::U32 => "u32".into(),
        ElemType::I32 => "i32".into(),
        ElemType::Half(h) => h.to_string(),
    }
}

fn wrap_for<B: TensorStore>(_b: &B, bufs: Vec<B::Buf>) -> TensorData {
    B::wrap(bufs)
}

fn ranked_data_for<B: TensorStore>(_b: &B, held: Vec<RankHeld<B::Buf>>) -> TensorData {
    B::wrap_ranked(held)
}

fn ranked_of<'d, B: TensorStore>(_b: &B, data: &'d TensorData) -> Option<&'d [RankHeld<B::Buf>]> {
    B::ranked(data)
}

/// Whole copies of `bufs` (on `backends[0]`) on the backends of ranks 1, 2, ...: rank `r`'s at
/// `r` (rank 0 holds the original, so none).
fn copies_on_ranks<B: Backend>(
    backends: &[&B],
    bufs: &[B::Buf],
) -> Result<Vec<RankHeld<B::Buf>>, RuntimeError> {
    // Each buffer read once, then written to every other rank.
    let host = bufs
        .iter()
        .map(|b| backends[0].download(b))
        .collect::<Result<Vec<_>, _>>()?;
    backends
        .iter()
        .enumerate()
        .map(|(r, backend)| {
            let whole = if r == 0 {
                None
            } else {
                let copy = host
                    .iter()
                    .map(|h| backend.upload(h.as_slice()))
                    .collect::<Result<Vec<_>, RuntimeError>>()?;
                Some(copy)
            };
            Ok(RankHeld {
                whole,
                rows: None,
                row_count: 0,
            })
        })
        .collect()
}

/// The shape and element type of an output tensor of `plan` (`None` for CSR and scalars).
fn output_shape(plan: &Plan, v: &popcorn_dsl::plan::Value) -> Option<(TensorShape, ElemType)> {
    match v.kind {
        ValueKind::Dense => Some((
            TensorShape::Dense {
                rows: v.rows,
                cols: v.cols,
            },
            ElemType::dense(plan.dtype, v.held),
        )),
        ValueKind::Index => Some((TensorShape::Index { len: v.rows }, ElemType::U32)),
        _ => None,
    }
}

/// The argument `t` gives parameter `name` of `program`, over `bufs` (its buffers on the
/// backend that runs it). A vector may be passed in either orientation: same memory.
fn plain_arg<'t, Buf>(
    program: &Program,
    name: &str,
    shape: TensorShape,
    bufs: &'t [Buf],
) -> Arg<'t, Buf> {
    let declared = program.param(name).map(|p| p.ty.clone());
    match (declared, shape) {
        (Some(ty), TensorShape::Dense { rows, cols })
            if ty.storage == Storage::Dense && (rows == 1 || cols == 1) =>
        {
            let len = rows * cols;
            let (r, c) = if ty.shape.cols.is_one() && !ty.shape.rows.is_one() {
                (len, 1)
            } else if ty.shape.rows.is_one() && !ty.shape.cols.is_one() {
                (1, len)
            } else {
                (rows, cols)
            };
            Arg::Dense {
                buf: &bufs[0],
                rows: r,
                cols: c,
            }
        }
        _ => dense_arg(bufs, shape),
    }
}

fn bufs_for<'a, B: TensorStore>(b: &B, data: &'a TensorData) -> Result<&'a [B::Buf], RuntimeError> {
    B::bufs(data).ok_or_else(|| {
        RuntimeError::Binding(format!(
            "the tensor lives on another device than this context ({})",
            b.describe()
        ))
    })
}

/// Binds dimension sizes from the tensors' shapes, checks every argument against the
/// signature, and collects scalars and the entry counts of CSR inputs.
pub fn bind(
    program: &Program,
    args: &Args<'_>,
) -> Result<(DimBindings, ScalarBindings, BTreeMap<String, usize>), RuntimeError> {
    let mut dims: DimBindings = DimBindings::new();
    let mut from: BTreeMap<String, String> = BTreeMap::new();
    let mut scalars = ScalarBindings::new();
    let mut nnz = BTreeMap::new();
    let mut set_dim = |dims: &mut DimBindings,
                       d: &popcorn_dsl::Dim,
                       value: usize,
                       source: String|
     -> Result<(), RuntimeError> {
        match d {
            popcorn_dsl::Dim::Fixed(f) if *f != value => Err(RuntimeError::Binding(format!(
                "{source} is {value} but the signature fixes it to {f}"
            ))),
            popcorn_dsl::Dim::Fixed(_) => Ok(()),
            popcorn_dsl::Dim::Sym(s) => match dims.get(s) {
                Some(prev) if *prev != value => Err(RuntimeError::DimensionMismatch {
                    dim: s.clone(),
                    first: *prev,
                    first_from: from[s].clone(),
                    second: value,
                    second_from: source,
                }),
                _ => {
                    dims.insert(s.clone(), value);
                    from.insert(s.clone(), source);
                    Ok(())
                }
            },
        }
    };
    let expected = || {
        program
            .params
            .iter()
            .map(|p| format!("{}: {}", p.name, p.ty))
            .collect::<Vec<_>>()
            .join(", ")
    };
    for (name, t) in &args.tensors {
        let p = program.param(name).ok_or_else(|| {
            RuntimeError::Binding(format!(
                "`{}` has no parameter `{name}`; its parameters are {}",
                program.name,
                expected()
            ))
        })?;
        let ty = &p.ty;
        let kind_ok = matches!(
            (ty.storage, t.shape),
            (Storage::Dense, TensorShape::Dense { .. })
                | (Storage::Csr, TensorShape::Csr { .. })
                | (Storage::Index, TensorShape::Index { .. })
        );
        if !kind_ok {
            return Err(RuntimeError::Binding(format!(
                "`{name}` is declared {ty} but a {} was passed",
                t.shape
            )));
        }
        let (mut rows, mut cols) = t.dims();
        if ty.storage == Storage::Dense && (rows == 1 || cols == 1) {
            let len = rows * cols;
            if ty.shape.cols.is_one() && !ty.shape.rows.is_one() {
                (rows, cols) = (len, 1);
            } else if ty.shape.rows.is_one() && !ty.shape.cols.is_one() {
                (rows, cols) = (1, len);
            }
        }
        set_dim(
            &mut dims,
            &ty.shape.rows,
            rows,
            format!("the rows of `{name}`"),
        )?;
        set_dim(
            &mut dims,
            &ty.shape.cols,
            cols,
            format!("the columns of `{name}`"),
        )?;
        if let TensorShape::Csr { nnz: z, .. } = t.shape {
            nnz.insert(name.to_string(), z);
        }
    }
    for (name, v) in &args.dims {
        set_dim(
            &mut dims,
            &popcorn_dsl::Dim::Sym(name.to_string()),
            *v,
            format!("the value given for `{name}`"),
        )?;
    }
    for (name, v) in &args.scalars {
        match program.param(name) {
            Some(p) if p.ty.is_scalar() => {
                scalars.insert(name.to_string(), *v);
            }
            Some(p) => {
                return Err(RuntimeError::Binding(format!(
                    "`{name}` is declared {} but a scalar was passed",
                    p.ty
                )))
            }
            None => {
                return Err(RuntimeError::Binding(format!(
                    "`{}` has no parameter `{name}`; its parameters are {}",
                    program.name,
                    expected()
                )))
            }
        }
    }
    for p in &program.params {
        let given = if p.ty.is_scalar() {
            scalars.contains_key(&p.name)
        } else {
            args.tensors.iter().any(|(n, _)| *n == p.name)
        };
        if !given {
            return Err(RuntimeError::Binding(format!(
                "missing argument `{}: {}` for `{}`",
                p.name, p.ty, program.name
            )));
        }
    }
    for d in program.dims() {
        if !dims.contains_key(&d) {
            return Err(RuntimeError::Binding(format!(
                "dimension `{d}` of `{}` is not determined by the inputs; pass it with Args::dim(\"{d}\", value)",
                program.name
            )));
        }
        if dims[&d] == 0 {
            return Err(RuntimeError::Binding(format!(
                "dimension `{d}` is 0; every dimension must be at least 1"
            )));
        }
    }
    Ok((dims, scalars, nnz))
}
