//! Runs a partitioned plan ([`popcorn_dsl::plan::collective`]) over `P` ranks of one process,
//! each rank on its own backend (one device per rank, or one backend shared by all): each rank
//! has its own buffers (its rows of every value held in rows, a whole copy of every
//! value it needs whole), the ranks run the schedule in lockstep, one entry at a time, rank 0
//! first, and a [`Collectives`] implementation carries the all-gathers and all-reduces between
//! them. On the CPU backend ([`InMemory`] collectives) this is how tests run partitioned plans
//! on any machine (`POPCORN_CPU_RANKS=P`); the result equals the unpartitioned plan's (see the
//! determinism rule in [`popcorn_dsl::plan::collective`]).
//!
//! An input is either one tensor on rank 0's backend ([`RankInput::Whole`]) or already held by
//! the ranks ([`RankInput::Ranked`]: each rank's block of rows and/or whole copy, as
//! [`execute_ranked`] returns its outputs). A whole tensor is read in place by every rank
//! sharing rank 0's backend and copied once onto each other rank's backend, and a rank's rows
//! of it are copied out of it once, before the first step that reads them (a sparse input's
//! block of rows with its row offsets rebased to 0). A ranked input is read where it lies: a
//! step that needs it whole while the ranks hold only rows all-gathers it first.
//! A rank that owns no rows (fewer points than ranks) skips the local steps, and its partial
//! sums are zero. [`execute`] assembles the outputs at the end (values held in rows from every
//! rank's rows in rank order, replicated ones from rank 0) into the caller's tensors on rank
//! 0's backend; [`execute_ranked`] leaves them on the ranks, so that a value held in rows (a
//! kernel matrix) is never whole anywhere.

pub mod collective;
mod recordings;
pub mod spares;
pub(crate) mod tensors;
#[cfg(test)]
pub(crate) mod tests;
mod timing;
pub mod world;

pub use collective::{Collectives, Gather, InMemory};
pub(crate) use recordings::RankRecorded;
pub use spares::SpareBuffers;

use crate::backend::{Arg, Backend, BufferInfo, ElemType, HostVec};
use crate::error::RuntimeError;
use collective::{concatenated, prefix, slice, write_prefix};
use popcorn_dsl::plan::collective::{CollectiveKind, Partition, RankStep, StepMode};
use popcorn_dsl::plan::{Home, Plan, Step, Value, ValueId, ValueKind};
use popcorn_dsl::{DimBindings, ScalarBindings};
use std::collections::HashMap;
use timing::RankClock;

/// How long the ranks of a run wait for one another: `POPCORN_RANK_TIMEOUT` seconds, by
/// default 600.
pub fn rank_timeout() -> std::time::Duration {
    let seconds = popcorn_dsl::settings::settings()
        .rank_timeout_s
        .unwrap_or(600);
    std::time::Duration::from_secs(seconds as u64)
}

/// One value's storage on one rank: one buffer (dense, index) or three (CSR).
type Slot<Buf> = Option<Vec<Buf>>;

/// How a partitioned run receives one input tensor.
pub enum RankInput<'a, Buf> {
    /// One tensor on rank 0's backend.
    Whole(Arg<'a, Buf>),
    /// Held by the ranks already: rank `r`'s forms at `r`.
    Ranked(Vec<RankForms<'a, Buf>>),
}

/// What one rank holds of a ranked input: its block of rows (the partition's rows for this
/// rank), its whole copy, or both.
pub struct RankForms<'a, Buf> {
    /// The whole value, on this rank's backend.
    pub whole: Option<Arg<'a, Buf>>,
    /// This rank's block of rows, on its backend.
    pub rows: Option<Arg<'a, Buf>>,
}

/// The outputs of [`execute_ranked`] by name, rank `r`'s part at `r`.
pub type RankedOutputs<Buf> = HashMap<String, Vec<RankHeld<Buf>>>;

/// What one rank holds of an output of [`execute_ranked`]: its block of rows (`rows` rows of
/// the value) and/or a whole copy, each as the value's buffers (one, dense or index).
pub struct RankHeld<Buf> {
    /// The whole value.
    pub whole: Option<Vec<Buf>>,
    /// This rank's block of rows.
    pub rows: Option<Vec<Buf>>,
    /// How many rows the block holds.
    pub row_count: usize,
}

/// One rank's buffers, by value.
struct RankStore<Buf> {
    /// Its rows of the values held in rows.
    rows: Vec<Slot<Buf>>,
    /// Whole copies of the values it holds whole (inputs excepted: those are the caller's).
    whole: Vec<Slot<Buf>>,
    /// The stored entries of its block of rows of each sparse value held in rows.
    block_nnz: Vec<usize>,
    /// Its copies of the inputs it reads whole, where its backend is not rank 0's.
    inputs: HashMap<String, Vec<Buf>>,
}

/// The run's state: every rank's buffers, and which forms of each value are written.
struct Run<'p, 'a, B: Backend> {
    /// Rank `r`'s backend at `r` (for a rank of another process, this process's first
    /// backend: never used, as nothing runs here for it).
    backends: Vec<&'p B>,
    /// The ranks this process runs, in increasing order.
    local: Vec<usize>,
    /// The backend the caller's whole inputs and outputs live on (the first local rank's).
    home: &'p B,
    plan: &'p Plan,
    part: &'p Partition,
    inputs: &'p HashMap<String, RankInput<'a, B::Buf>>,
    scalars: &'p ScalarBindings,
    dims: &'p DimBindings,
    ranks: Vec<RankStore<B::Buf>>,
    rows_ok: Vec<bool>,
    whole_ok: Vec<bool>,
    /// The value whose buffers each value uses ([`storage_of`]).
    storage: Vec<usize>,
}

/// The element type of a value's (first) buffer.
fn elem_of(plan: &Plan, v: &Value) -> ElemType {
    match v.kind {
        ValueKind::Index => ElemType::U32,
        _ => ElemType::dense(plan.dtype, v.held),
    }
}

/// Allocates the buffers of `v` at `rows` rows: one for dense and index values, three for CSR
/// (row offsets, column indices, values), none for host scalars.
/// A dense or index value's one buffer comes from rank `rank`'s spares where one fits.
fn alloc<B: Backend>(
    backend: &B,
    plan: &Plan,
    v: &Value,
    rows: usize,
    (spares, rank, at): (&SpareBuffers<B::Buf>, usize, spares::Place),
) -> Result<Vec<B::Buf>, RuntimeError> {
    Ok(match &v.kind {
        ValueKind::Scalar(_) => Vec::new(),
        ValueKind::Csr { nnz } => {
            let nnz = nnz.unwrap_or(v.cols);
            vec![
                backend.alloc(ElemType::I32, rows + 1)?,
                backend.alloc(ElemType::I32, nnz.max(1))?,
                backend.alloc(ElemType::float(plan.dtype), nnz.max(1))?,
            ]
        }
        _ => {
            let (elem, len) = (elem_of(plan, v), (rows * v.cols).max(1));
            match spares.take(rank, elem, len, at) {
                Some(buf) => vec![buf],
                None => vec![backend.alloc(elem, len)?],
            }
        }
    })
}

/// Where a run's buffers serve, for [`SpareBuffers`]: the values of one plan (its program and
/// number of values hashed once), held in rows or whole; the same value of the same program
/// gets the same spare buffer run after run.
#[derive(Clone, Copy)]
struct Places(u64);

impl Places {
    fn of(plan: &Plan) -> Places {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        (&plan.program, plan.values.len()).hash(&mut h);
        Places(h.finish())
    }

    /// The place of value `v`, held in rows or `whole` (distinct for distinct `(v, whole)`:
    /// an odd multiplier is a bijection).
    fn at(self, v: usize, whole: bool) -> spares::Place {
        self.0 ^ ((2 * v + usize::from(whole)) as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
    }
}

/// The bytes rank `r` allocates to run `plan`: its rows of every value held in rows and a
/// whole copy of every value made whole (inputs excepted: those are the caller's).
pub fn rank_bytes(plan: &Plan, part: &Partition, r: usize) -> usize {
    let whole = made_whole(plan, part);
    let storage = storage_of(plan, part, &whole);
    let local = part.rows(r).len();
    plan.values
        .iter()
        .enumerate()
        .filter(|(i, v)| storage[*i] == *i && !matches!(v.home, Home::Input(_) | Home::Host))
        .map(|(i, v)| {
            let elem = match v.kind {
                ValueKind::Dense | ValueKind::Index => elem_of(plan, v).size_bytes(),
                _ => return 0,
            };
            let rows = if part.splits(v) { local } else { 0 };
            let whole_rows = if whole[i] { v.rows } else { 0 };
            (rows + whole_rows) * v.cols * elem
        })
        .sum()
}

/// For each value, the value whose storage it uses on every rank: itself, or the output it
/// lives in before that output is written ([`Home::InOutput`]: `B = X * X^T` in `K`'s rows),
/// where both have one form (rows, or whole) and one layout.
fn storage_of(plan: &Plan, part: &Partition, whole: &[bool]) -> Vec<usize> {
    (0..plan.values.len())
        .map(|i| {
            let v = &plan.values[i];
            let Home::InOutput(name) = &v.home else {
                return i;
            };
            let Some((_, o)) = plan.outputs.iter().find(|(n, _)| n == name) else {
                return i;
            };
            let out = plan.value(*o);
            let same = out.rows == v.rows
                && out.cols == v.cols
                && elem_of(plan, out) == elem_of(plan, v)
                && part.splits(out) == part.splits(v)
                && whole[o.0] == whole[i]
                && matches!(v.kind, ValueKind::Dense)
                && matches!(out.kind, ValueKind::Dense);
            if same {
                o.0
            } else {
                i
            }
        })
        .collect()
}

/// The values some schedule entry makes whole on every rank (beyond the inputs).
fn made_whole(plan: &Plan, part: &Partition) -> Vec<bool> {
    let mut whole = vec![false; plan.values.len()];
    for entry in &part.schedule {
        match entry {
            RankStep::Collective(c) => whole[c.value.0] = true,
            RankStep::Run { step, mode, .. } => {
                if let Some(s) = plan.steps.get(*step) {
                    for o in &s.outputs {
                        let local_rows = *mode == StepMode::Local && part.splits(plan.value(*o));
                        if !local_rows {
                            whole[o.0] = true;
                        }
                    }
                }
            }
        }
    }
    whole
}

/// Runs the partitioned `plan` over its ranks, rank `r` on `backends[r]` (one entry per rank;
/// the same backend may serve several), the ranks exchanging through `collectives`. `inputs`,
/// `outputs`, `scalars` and `dims` as for [`crate::executor::execute`], their tensors on rank
/// 0's backend; the outputs receive the whole results.
#[allow(clippy::too_many_arguments)]
pub fn execute<B: Backend>(
    backends: &[&B],
    plan: &Plan,
    collectives: &dyn Collectives<B>,
    inputs: &HashMap<String, Arg<'_, B::Buf>>,
    outputs: &HashMap<String, Arg<'_, B::Buf>>,
    scalars: &ScalarBindings,
    dims: &DimBindings,
) -> Result<(), RuntimeError> {
    let inputs: HashMap<String, RankInput<'_, B::Buf>> = inputs
        .iter()
        .map(|(name, arg)| (name.clone(), RankInput::Whole(arg.clone())))
        .collect();
    let mut held = execute_ranked(backends, plan, collectives, &inputs, scalars, dims)?;
    // Every output written whole into the caller's tensor on rank 0's backend.
    for (name, v) in &plan.outputs {
        let value = plan.value(*v);
        let Some(parts) = held.remove(name) else {
            continue; // a host scalar
        };
        let dest = match outputs.get(name) {
            Some(Arg::Dense { buf, .. }) | Some(Arg::Index { buf, .. }) => *buf,
            _ => {
                return Err(RuntimeError::Binding(format!(
                    "output `{name}` was not provided"
                )))
            }
        };
        if dest.len() < value.len() {
            return Err(RuntimeError::Binding(format!(
                "output `{name}` holds {} elements, {} needed",
                dest.len(),
                value.len()
            )));
        }
        let data = whole_on_host(backends, &parts, value.rows, value.cols)?;
        write_prefix(backends[0], dest, &data)?;
    }
    Ok(())
}

/// Runs the partitioned `plan` as [`execute`] does, with inputs whole or already on the ranks,
/// and leaves every output (but host scalars) on the ranks: by output name, rank `r`'s
/// [`RankHeld`] at `r` (its rows where the value is held in rows, a whole copy where the
/// plan made it whole on every rank).
pub fn execute_ranked<B: Backend>(
    backends: &[&B],
    plan: &Plan,
    collectives: &dyn Collectives<B>,
    inputs: &HashMap<String, RankInput<'_, B::Buf>>,
    scalars: &ScalarBindings,
    dims: &DimBindings,
) -> Result<RankedOutputs<B::Buf>, RuntimeError> {
    let local = every_rank(backends, plan)?;
    let spares = SpareBuffers::new();
    execute_ranked_local(&local, plan, collectives, inputs, scalars, dims, &spares)
}

/// The first buffer of a value's storage, if it has one.
fn first<Buf>(bufs: &Option<Vec<Buf>>) -> Option<&Buf> {
    bufs.as_ref().and_then(|b| b.first())
}

/// A `rows x cols` value the ranks hold, whole on the host: rank 0's whole copy where it has
/// one, else every rank's rows in rank order. `backends[r]` is rank `r`'s.
pub(crate) fn whole_on_host<B: Backend>(
    backends: &[&B],
    held: &[RankHeld<B::Buf>],
    rows: usize,
    cols: usize,
) -> Result<HostVec, RuntimeError> {
    if let Some(whole) = held.first().and_then(|h| first(&h.whole)) {
        return prefix(backends[0].download(whole)?, rows * cols);
    }
    let parts = held
        .iter()
        .zip(backends)
        .map(|(h, backend)| {
            let buf = first(&h.rows).ok_or_else(|| {
                RuntimeError::Internal(
                    "a ranked value with neither every rank's rows nor a whole copy".into(),
                )
            })?;
            prefix(backend.download(buf)?, h.row_count * cols)
        })
        .collect::<Result<Vec<_>, _>>()?;
    concatenated(parts)?.ok_or_else(|| RuntimeError::Internal("a value over no ranks".into()))
}

/// Every rank of `plan` with its backend, from one backend per rank.
fn every_rank<'b, B>(backends: &[&'b B], plan: &Plan) -> Result<Vec<(usize, &'b B)>, RuntimeError> {
    let ranks = plan.partition.as_ref().map_or(1, |p| p.ranks());
    if backends.len() != ranks {
        return Err(RuntimeError::InvalidData(format!(
            "the plan of `{}` runs on {ranks} ranks but {} backends were given",
            plan.program,
            backends.len()
        )));
    }
    Ok(backends.iter().copied().enumerate().collect())
}

/// [`execute_ranked`] for the ranks this process drives of a run whose other ranks run in
/// other processes (one per GPU under `mpirun`): `local` pairs each rank this process runs
/// with its backend, in increasing rank order; `collectives` reach the other processes'
/// ranks. Ranked inputs and outputs hold this process's ranks' parts only (the others' left
/// empty); a whole input is this process's own copy, on its first local rank's backend. The
/// run's own buffers come from `spares` where they fit and go back there at its end.
pub fn execute_ranked_local<B: Backend>(
    local: &[(usize, &B)],
    plan: &Plan,
    collectives: &dyn Collectives<B>,
    inputs: &HashMap<String, RankInput<'_, B::Buf>>,
    scalars: &ScalarBindings,
    dims: &DimBindings,
    spares: &SpareBuffers<B::Buf>,
) -> Result<RankedOutputs<B::Buf>, RuntimeError> {
    plan.validate()?;
    let with = RunWith {
        collectives,
        scalars,
        dims,
        spares,
        recorded: None,
    };
    run_ranked_local(local, plan, inputs, &with, RankedOutputs::new())
}

/// What a partitioned run goes by besides its plan, its ranks and its inputs.
pub(crate) struct RunWith<'r, B: Backend> {
    /// How the ranks exchange.
    pub collectives: &'r dyn Collectives<B>,
    /// The scalar arguments.
    pub scalars: &'r ScalarBindings,
    /// The sizes.
    pub dims: &'r DimBindings,
    /// Where the run's own buffers come from and go back to.
    pub spares: &'r SpareBuffers<B::Buf>,
    /// The plan's recorded runs, where runs may be recorded as graphs.
    pub recorded: Option<&'r RankRecorded<B>>,
}

/// [`execute_ranked_local`] for a plan already checked ([`Plan::validate`]): a context checks
/// its plans once, when it makes them, instead of at every run (the check is host time before
/// any rank has work; BENCHMARKS.md, run 32). The buffers of `reuse` (earlier outputs of this
/// plan, by output name, as this function returns them) are written again where they fit.
pub(crate) fn run_ranked_local<B: Backend>(
    local: &[(usize, &B)],
    plan: &Plan,
    inputs: &HashMap<String, RankInput<'_, B::Buf>>,
    with: &RunWith<'_, B>,
    reuse: RankedOutputs<B::Buf>,
) -> Result<RankedOutputs<B::Buf>, RuntimeError> {
    let (collectives, spares) = (with.collectives, with.spares);
    let mut clock = RankClock::new(std::time::Instant::now());
    let mut run = start(
        local,
        plan,
        inputs,
        with.scalars,
        with.dims,
        (spares, reuse),
    )?;
    if let Some(c) = clock.as_mut() {
        c.host_stage("prepare");
        c.start(local.to_vec())?;
    }
    run.settled(collectives, |run| {
        let replayed = match with.recorded {
            Some(recorded) => recorded.queue(run, collectives)?,
            None => false,
        };
        let queued = if replayed {
            Ok(())
        } else {
            run.schedule(collectives, clock.as_mut())
        };
        if let Some(c) = clock.as_mut() {
            c.host_stage("queue");
        }
        queued
    })?;
    if let Some(c) = clock.as_mut() {
        c.host_stage("settle");
    }
    let outputs = run.into_ranked(spares)?;
    if let Some(mut c) = clock {
        c.host_stage("hand over");
        c.print(plan)?;
    }
    Ok(outputs)
}

/// Checks the ranks, allocates every rank's buffers and copies the whole inputs the ranks on
/// other backends read.
fn start<'p, 'a, B: Backend>(
    local: &[(usize, &'p B)],
    plan: &'p Plan,
    inputs: &'p HashMap<String, RankInput<'a, B::Buf>>,
    scalars: &'p ScalarBindings,
    dims: &'p DimBindings,
    (spares, mut reuse): (&SpareBuffers<B::Buf>, RankedOutputs<B::Buf>),
) -> Result<Run<'p, 'a, B>, RuntimeError> {
    let part = plan.partition.as_ref().ok_or_else(|| {
        RuntimeError::InvalidData(format!(
            "the plan of `{}` is not partitioned; run it with the executor",
            plan.program
        ))
    })?;
    let in_order = local.windows(2).all(|w| w[0].0 < w[1].0);
    let Some(&(_, home)) = local.first() else {
        return Err(RuntimeError::InvalidData(format!(
            "the plan of `{}` was given no ranks to run",
            plan.program
        )));
    };
    if !in_order || local.iter().any(|(r, _)| *r >= part.ranks()) {
        return Err(RuntimeError::InvalidData(format!(
            "the plan of `{}` runs on {} ranks but was given ranks {:?}",
            plan.program,
            part.ranks(),
            local.iter().map(|(r, _)| *r).collect::<Vec<_>>()
        )));
    }
    let mut backends = vec![home; part.ranks()];
    for (r, b) in local {
        backends[*r] = b;
    }
    let local_ranks: Vec<usize> = local.iter().map(|(r, _)| *r).collect();
    let whole = made_whole(plan, part);
    let storage = storage_of(plan, part, &whole);
    let read_whole = inputs_read_whole(plan, part);
    // Ranked inputs: checked against the partition; where every rank holds its rows, no rows
    // are cut (nor allocated).
    let mut given_rows = vec![false; plan.values.len()];
    let mut given_whole = vec![true; plan.values.len()];
    for (i, v) in plan.values.iter().enumerate() {
        let Home::Input(name) = &v.home else { continue };
        let Some(RankInput::Ranked(forms)) = inputs.get(name) else {
            continue;
        };
        if forms.len() != part.ranks() {
            return Err(RuntimeError::Binding(format!(
                "tensor `{name}` is held by {} ranks; this plan runs on {}",
                forms.len(),
                part.ranks()
            )));
        }
        for (r, f) in forms.iter().enumerate() {
            if !local_ranks.contains(&r) {
                continue;
            }
            if let Some(Arg::Dense { rows, .. } | Arg::Index { len: rows, .. }) = &f.rows {
                if *rows != part.rows(r).len() {
                    return Err(RuntimeError::Binding(format!(
                        "tensor `{name}`: rank {r} holds {rows} rows, the plan gives it {}; \
                         pass it whole or split as this plan splits `{}`",
                        part.rows(r).len(),
                        part.spec.dim
                    )));
                }
            }
        }
        given_rows[i] = local_ranks.iter().all(|r| forms[*r].rows.is_some());
        given_whole[i] = local_ranks.iter().all(|r| forms[*r].whole.is_some());
        if !given_rows[i] && !given_whole[i] {
            return Err(RuntimeError::Binding(format!(
                "tensor `{name}` is held by this process's ranks neither in rows nor whole on each"
            )));
        }
    }
    let mut ranks = Vec::with_capacity(part.ranks());
    let places = Places::of(plan);
    for (r, backend) in backends.iter().copied().enumerate() {
        let local = part.rows(r).len();
        let mut store = RankStore {
            rows: Vec::with_capacity(plan.values.len()),
            whole: Vec::with_capacity(plan.values.len()),
            block_nnz: vec![0; plan.values.len()],
            inputs: HashMap::new(),
        };
        if !local_ranks.contains(&r) {
            // Another process's rank: nothing of it lives here.
            store.rows = (0..plan.values.len()).map(|_| None).collect();
            store.whole = (0..plan.values.len()).map(|_| None).collect();
            ranks.push(store);
            continue;
        }
        if !std::ptr::eq(backend, home) {
            for name in &read_whole {
                if let Some(RankInput::Whole(arg)) = inputs.get(name) {
                    store
                        .inputs
                        .insert(name.clone(), copy_across(home, backend, arg)?);
                }
            }
        }
        for (i, v) in plan.values.iter().enumerate() {
            // A sparse value's blocks of rows are allocated when they are cut (their sizes
            // come with the data).
            let dense = matches!(v.kind, ValueKind::Dense | ValueKind::Index);
            let own = storage[i] == i;
            // An earlier output of this value, given back to be written again.
            let mut again = |whole: bool, rows: usize| {
                let (name, _) = plan.outputs.iter().find(|(_, o)| o.0 == i)?;
                let held = reuse.get_mut(name)?.get_mut(r)?;
                let bufs = if whole {
                    held.whole.take()
                } else {
                    held.rows.take()
                }?;
                let want = (elem_of(plan, v), (rows * v.cols).max(1));
                let fits = matches!(&bufs[..], [b] if (b.elem(), b.len()) == want);
                fits.then_some(bufs)
            };
            store
                .rows
                .push(if own && dense && part.splits(v) && !given_rows[i] {
                    match again(false, local) {
                        Some(bufs) => Some(bufs),
                        None => Some(alloc(
                            backend,
                            plan,
                            v,
                            local,
                            (spares, r, places.at(i, false)),
                        )?),
                    }
                } else {
                    None
                });
            let input = matches!(v.home, Home::Input(_));
            let gathered_input = input && !given_whole[i] && read_whole.contains(&v.name);
            store
                .whole
                .push(if own && ((whole[i] && !input) || gathered_input) {
                    match again(true, v.rows) {
                        Some(bufs) => Some(bufs),
                        None => Some(alloc(
                            backend,
                            plan,
                            v,
                            v.rows,
                            (spares, r, places.at(i, true)),
                        )?),
                    }
                } else {
                    None
                });
        }
        ranks.push(store);
    }
    Ok(Run {
        backends,
        local: local_ranks,
        home,
        plan,
        part,
        inputs,
        scalars,
        dims,
        ranks,
        rows_ok: given_rows,
        whole_ok: plan
            .values
            .iter()
            .zip(&given_whole)
            .map(|(v, given)| match v.home {
                Home::Input(_) => *given,
                Home::Host => true,
                _ => false,
            })
            .collect(),
        storage,
    })
}

impl<'p, 'a: 'p, B: Backend> Run<'p, 'a, B> {
    /// Runs the partition's schedule: the steps on every rank, the collectives between them.
    fn schedule(
        &mut self,
        collectives: &dyn Collectives<B>,
        mut clock: Option<&mut RankClock<'_, B>>,
    ) -> Result<(), RuntimeError> {
        let (plan, part) = (self.plan, self.part);
        let local = self.local.clone();
        let backends = self.local_backends();
        let run = self;
        for entry in &part.schedule {
            match entry {
                RankStep::Run {
                    step,
                    mode,
                    rows_of,
                } => run.step(*step, *mode, rows_of, collectives)?,
                RankStep::Collective(c) => {
                    let v = c.value;
                    let name = &plan.value(v).name;
                    let failed = |e: RuntimeError| {
                        RuntimeError::InvalidData(format!(
                            "{} of `{name}` over {} ranks ({}): {e}",
                            c.name(),
                            part.ranks(),
                            collectives.describe()
                        ))
                    };
                    match c.kind {
                        CollectiveKind::AllGather => {
                            run.require_rows(v)?;
                            run.gather_rows(v, collectives).map_err(failed)?;
                        }
                        CollectiveKind::AllReduceSum => {
                            let bufs = local
                                .iter()
                                .map(|&r| run.whole_buf(r, v))
                                .collect::<Result<Vec<_>, _>>()?;
                            collectives
                                .all_reduce_sum(&local, &backends, &bufs, c.len)
                                .map_err(failed)?;
                        }
                    }
                    run.whole_ok[v.0] = true;
                }
            }
            if let Some(c) = clock.as_mut() {
                c.after(plan, entry)?;
            }
        }
        Ok(())
    }

    /// The backends of this process's ranks, in the order of `self.local`.
    fn local_backends(&self) -> Vec<&'p B> {
        self.local.iter().map(|&r| self.backends[r]).collect()
    }

    /// Runs `work`, then waits for every rank to settle ([`Collectives::settle`]); where the
    /// work failed, the other ranks are told first ([`Collectives::abandon`]). Where settling
    /// fails too (it names the failed rank), both errors are returned together.
    fn settled(
        &mut self,
        collectives: &dyn Collectives<B>,
        work: impl FnOnce(&mut Self) -> Result<(), RuntimeError>,
    ) -> Result<(), RuntimeError> {
        let result = work(self);
        if let Err(e) = &result {
            collectives.abandon(e);
        }
        let settle = collectives.settle(&self.local, &self.local_backends());
        match (result, settle) {
            (Ok(()), settle) => settle,
            (Err(e), Ok(())) => Err(e),
            // The settling names the rank that failed; the run's own error says where it
            // stopped.
            (Err(e), Err(s)) => Err(RuntimeError::Device(format!(
                "{s} (the run stopped at: {e})"
            ))),
        }
    }

    /// Rank `r`'s buffer of its rows of `v`.
    fn rows_buf(&self, r: usize, v: ValueId) -> Result<&B::Buf, RuntimeError> {
        first(&self.ranks[r].rows[self.storage[v.0]]).ok_or_else(|| self.missing("rows", v))
    }

    /// Rank `r`'s whole copy of `v` (not an input's: those are the caller's).
    fn whole_buf(&self, r: usize, v: ValueId) -> Result<&B::Buf, RuntimeError> {
        first(&self.ranks[r].whole[self.storage[v.0]])
            .ok_or_else(|| self.missing("a whole copy", v))
    }

    fn missing(&self, what: &str, v: ValueId) -> RuntimeError {
        RuntimeError::Internal(format!(
            "the partitioned plan of `{}` keeps no {what} of `{}`",
            self.plan.program,
            self.plan.value(v).name
        ))
    }

    /// Makes every rank's rows of `v` available: copied out of the whole value where only
    /// that is written (an input, or a replicated step's result).
    fn require_rows(&mut self, v: ValueId) -> Result<(), RuntimeError> {
        if self.rows_ok[v.0] {
            return Ok(());
        }
        if !self.whole_ok[v.0] {
            return Err(self.missing("written rows", v));
        }
        let value = self.plan.value(v);
        if matches!(value.kind, ValueKind::Csr { .. }) {
            return self.cut_sparse_rows(v);
        }
        let cols = value.cols;
        // A whole copy on the rank's own backend gives its rows by a copy there; an input on
        // another backend is read once on the host and each rank's block written.
        let mut input_data: Option<HostVec> = None;
        for r in self.local.clone() {
            let rows = self.part.rows(r);
            if rows.is_empty() {
                continue;
            }
            let backend = self.backends[r];
            let input = match self.inputs.get(input_name(value)) {
                Some(RankInput::Whole(Arg::Dense { buf, .. }))
                | Some(RankInput::Whole(Arg::Index { buf, .. })) => Some(*buf),
                _ => None,
            };
            let on_this_backend = first(&self.ranks[r].whole[self.storage[v.0]])
                .or_else(|| {
                    self.ranked_form(r, v, false)
                        .and_then(|a| a.buffers().first().copied())
                })
                .or(input.filter(|_| std::ptr::eq(backend, self.home)));
            let dest = self.rows_buf(r, v)?;
            if let Some(whole) = on_this_backend {
                backend.copy_block(whole, rows.start * cols, dest, rows.len() * cols)?;
                continue;
            }
            let data = match &mut input_data {
                Some(d) => &*d,
                empty => {
                    let buf = input.ok_or_else(|| self.missing("input tensor", v))?;
                    &*empty.insert(self.home.download(buf)?)
                }
            };
            let block = slice(data, rows.start * cols..rows.end * cols)?;
            write_prefix(backend, dest, &block)?;
        }
        self.rows_ok[v.0] = true;
        Ok(())
    }

    /// Cuts a sparse input into the ranks' blocks of rows: each block's row offsets rebased to
    /// 0, its column indices and values as they are (so a block's rows hold exactly the
    /// entries of the whole matrix's rows, in the same order).
    fn cut_sparse_rows(&mut self, v: ValueId) -> Result<(), RuntimeError> {
        let value = self.plan.value(v);
        let (row_ptr, col_idx, values, rows) = match self.inputs.get(input_name(value)) {
            Some(RankInput::Whole(Arg::Csr {
                row_ptr,
                col_idx,
                values,
                rows,
                ..
            })) => (*row_ptr, *col_idx, *values, *rows),
            _ => return Err(self.missing("sparse input given whole", v)),
        };
        let HostVec::I32(offsets) = self.home.download(row_ptr)? else {
            return Err(RuntimeError::InvalidData(format!(
                "the row offsets of `{}` are not 32-bit integers",
                value.name
            )));
        };
        let at = |i: usize| -> Result<usize, RuntimeError> {
            offsets
                .get(i)
                .and_then(|&o| usize::try_from(o).ok())
                .ok_or_else(|| {
                    RuntimeError::InvalidData(format!(
                        "`{}`: row offset {i} is missing or negative ({} rows)",
                        value.name, rows
                    ))
                })
        };
        let col_idx = self.home.download(col_idx)?;
        let entries = self.home.download(values)?;
        for r in self.local.clone() {
            let block = self.part.rows(r);
            let (first, end) = (at(block.start)?, at(block.end)?);
            if end < first {
                return Err(RuntimeError::InvalidData(format!(
                    "`{}`: row offsets decrease between rows {} and {}",
                    value.name, block.start, block.end
                )));
            }
            let rebased: Vec<i32> = offsets[block.start..=block.end]
                .iter()
                .map(|&o| o - offsets[block.start])
                .collect();
            let nnz = end - first;
            let backend = self.backends[r];
            let bufs = vec![
                backend.alloc(ElemType::I32, block.len() + 1)?,
                backend.alloc(ElemType::I32, nnz.max(1))?,
                backend.alloc(ElemType::float(self.plan.dtype), nnz.max(1))?,
            ];
            write_prefix(backend, &bufs[0], &HostVec::I32(rebased))?;
            write_prefix(backend, &bufs[1], &slice(&col_idx, first..end)?)?;
            write_prefix(backend, &bufs[2], &slice(&entries, first..end)?)?;
            self.ranks[r].rows[v.0] = Some(bufs);
            self.ranks[r].block_nnz[v.0] = nnz;
        }
        self.rows_ok[v.0] = true;
        Ok(())
    }

    /// The argument of `v` on rank `r`: its rows, or the whole value.
    fn arg(&self, r: usize, v: ValueId, rows: bool) -> Result<Arg<'_, B::Buf>, RuntimeError> {
        let value = self.plan.value(v);
        if let ValueKind::Scalar(e) = &value.kind {
            return e
                .eval(self.scalars, self.dims)
                .map(Arg::Scalar)
                .map_err(|e| RuntimeError::Binding(e.to_string()));
        }
        if let Some(form) = self.ranked_form(r, v, rows) {
            return Ok(form.clone());
        }
        let (bufs, n) = if rows {
            let bufs = self.ranks[r].rows[self.storage[v.0]]
                .as_ref()
                .ok_or_else(|| self.missing("rows", v))?;
            (bufs, self.part.rows(r).len())
        } else {
            match (&value.home, self.ranks[r].whole[self.storage[v.0]].as_ref()) {
                (Home::Input(name), None) => {
                    let Some(RankInput::Whole(given)) = self.inputs.get(name) else {
                        return Err(RuntimeError::Binding(format!(
                            "input `{name}` was not provided"
                        )));
                    };
                    return match self.ranks[r].inputs.get(name) {
                        // A rank on another backend reads its own copy.
                        Some(copy) => given
                            .with_buffers(copy)
                            .ok_or_else(|| self.missing("input copy", v)),
                        None => Ok(given.clone()),
                    };
                }
                (_, Some(bufs)) => (bufs, value.rows),
                (_, None) => return Err(self.missing("a whole copy", v)),
            }
        };
        let buf = |i: usize| bufs.get(i).ok_or_else(|| self.missing("buffers", v));
        Ok(match &value.kind {
            ValueKind::Index => Arg::Index {
                buf: buf(0)?,
                len: n,
            },
            ValueKind::Csr { nnz } => Arg::Csr {
                row_ptr: buf(0)?,
                col_idx: buf(1)?,
                values: buf(2)?,
                rows: n,
                cols: value.cols,
                nnz: if rows {
                    self.ranks[r].block_nnz[v.0]
                } else {
                    nnz.unwrap_or(value.cols)
                },
            },
            _ => Arg::Dense {
                buf: buf(0)?,
                rows: n,
                cols: value.cols,
            },
        })
    }

    /// Runs plan step `i` on every rank.
    fn step(
        &mut self,
        i: usize,
        mode: StepMode,
        rows_of: &[bool],
        collectives: &dyn Collectives<B>,
    ) -> Result<(), RuntimeError> {
        let plan = self.plan;
        let step = plan
            .steps
            .get(i)
            .ok_or_else(|| RuntimeError::InvalidData(format!("the plan has no step {i}")))?;
        for (k, v) in step.inputs.iter().enumerate() {
            if rows_of.get(k) == Some(&true) {
                self.require_rows(*v)?;
            } else if !self.whole_ok[v.0] {
                self.gather_input(*v, collectives)?;
            }
        }
        let local = mode == StepMode::Local;
        let out_rows: Vec<bool> = step
            .outputs
            .iter()
            .map(|o| local && self.part.splits(plan.value(*o)))
            .collect();
        for r in self.local.clone() {
            self.rank_step(r, i, step, mode, rows_of, &out_rows)
                .map_err(|e| named(plan, i, r, e))?;
        }
        for (o, rows) in step.outputs.iter().zip(&out_rows) {
            if *rows {
                self.rows_ok[o.0] = true;
            } else {
                self.whole_ok[o.0] = true;
            }
        }
        Ok(())
    }

    /// Rank `r`'s own form of a ranked input `v` (its rows or its whole copy), if it holds it.
    fn ranked_form(&self, r: usize, v: ValueId, rows: bool) -> Option<&Arg<'a, B::Buf>> {
        match self.inputs.get(input_name(self.plan.value(v)))? {
            RankInput::Ranked(forms) => {
                let f = forms.get(r)?;
                if rows {
                    f.rows.as_ref()
                } else {
                    f.whole.as_ref()
                }
            }
            RankInput::Whole(_) => None,
        }
    }

    /// Makes a ranked input whole on every rank: an all-gather of the ranks' rows.
    fn gather_input(
        &mut self,
        v: ValueId,
        collectives: &dyn Collectives<B>,
    ) -> Result<(), RuntimeError> {
        let value = self.plan.value(v);
        if !matches!(value.home, Home::Input(_)) || !self.rows_ok[v.0] {
            return Err(self.missing("written whole copy", v));
        }
        self.gather_rows(v, collectives).map_err(|e| {
            RuntimeError::InvalidData(format!(
                "all-gather of input `{}` over {} ranks ({}): {e}",
                value.name,
                self.part.ranks(),
                collectives.describe()
            ))
        })?;
        self.whole_ok[v.0] = true;
        Ok(())
    }

    /// All-gathers every rank's rows of `v` (its own, or a ranked input's) into its whole copy.
    fn gather_rows(
        &self,
        v: ValueId,
        collectives: &dyn Collectives<B>,
    ) -> Result<(), RuntimeError> {
        let cols = self.plan.value(v).cols;
        let lens: Vec<usize> = (0..self.part.ranks())
            .map(|r| self.part.rows(r).len() * cols)
            .collect();
        let parts = self
            .local
            .iter()
            .map(|&r| {
                let rows = self.arg(r, v, true)?;
                let buf = rows.buffers().first().copied();
                Ok((buf.ok_or_else(|| self.missing("rows", v))?, lens[r]))
            })
            .collect::<Result<Vec<_>, RuntimeError>>()?;
        let wholes = self
            .local
            .iter()
            .map(|&r| self.whole_buf(r, v))
            .collect::<Result<Vec<_>, _>>()?;
        let backends = self.local_backends();
        collectives.all_gather(&Gather {
            ranks: &self.local,
            backends: &backends,
            parts: &parts,
            lens: &lens,
            wholes: &wholes,
        })
    }

    /// Hands every output (but host scalars) over as the ranks hold it: their rows where the
    /// value is held in rows, their whole copies where the plan made it whole; the run's other
    /// dense buffers go to `spares`.
    fn into_ranked(
        mut self,
        spares: &SpareBuffers<B::Buf>,
    ) -> Result<RankedOutputs<B::Buf>, RuntimeError> {
        let mut out = HashMap::new();
        for (name, v) in &self.plan.outputs {
            let value = self.plan.value(*v);
            if matches!(value.home, Home::Host | Home::Input(_)) {
                continue;
            }
            let rows_ok = self.rows_ok[v.0];
            let whole_ok = self.whole_ok[v.0];
            let mut held = Vec::with_capacity(self.part.ranks());
            for r in 0..self.part.ranks() {
                if !self.local.contains(&r) {
                    held.push(RankHeld {
                        whole: None,
                        rows: None,
                        row_count: self.part.rows(r).len(),
                    });
                    continue;
                }
                let store = &mut self.ranks[r];
                let rows = if rows_ok {
                    store.rows[v.0].take()
                } else {
                    None
                };
                let whole = if whole_ok {
                    store.whole[v.0].take()
                } else {
                    None
                };
                if rows.is_none() && whole.is_none() {
                    return Err(self.missing("written result", *v));
                }
                held.push(RankHeld {
                    whole,
                    rows,
                    row_count: self.part.rows(r).len(),
                });
            }
            out.insert(name.clone(), held);
        }
        let places = Places::of(self.plan);
        let mut own = Vec::new();
        for (r, store) in self.ranks.iter_mut().enumerate() {
            for (v, (rows, whole)) in store.rows.iter_mut().zip(&mut store.whole).enumerate() {
                for (slot, is_whole) in [(rows, false), (whole, true)] {
                    // Dense and index values have one buffer; sparse blocks vary run to run.
                    if let Some(bufs) = slot.take().filter(|b| b.len() == 1) {
                        let at = places.at(v, is_whole);
                        own.extend(bufs.into_iter().map(|b| (r, b, at)));
                    }
                }
            }
        }
        spares.give_back(own);
        Ok(out)
    }

    /// Runs step `i` on rank `r`.
    fn rank_step(
        &self,
        r: usize,
        i: usize,
        step: &Step,
        mode: StepMode,
        rows_of: &[bool],
        out_rows: &[bool],
    ) -> Result<(), RuntimeError> {
        let local = mode == StepMode::Local;
        let outs = step
            .outputs
            .iter()
            .zip(out_rows)
            .map(|(o, rows)| self.arg(r, *o, *rows))
            .collect::<Result<Vec<_>, _>>()?;
        if local && self.part.rows(r).is_empty() {
            // No rows: nothing to compute, and a partial sum over no points is zero.
            for (o, rows) in outs.iter().zip(out_rows) {
                if let (false, Arg::Dense { buf, .. }) = (rows, o) {
                    self.backends[r].fill(buf, 0.0)?;
                }
            }
            return Ok(());
        }
        let ins = step
            .inputs
            .iter()
            .enumerate()
            .map(|(k, v)| self.arg(r, *v, rows_of.get(k) == Some(&true)))
            .collect::<Result<Vec<_>, _>>()?;
        let step = match mode {
            StepMode::Local => self.part.local_step(self.plan, i, r)?,
            StepMode::Shared => self.part.shared_step(self.plan, i, r)?,
            StepMode::Replicated => step.clone(),
        };
        let alpha = crate::executor::alpha(&step, self.scalars, self.dims)?;
        self.backends[r].run_step(&step, &ins, &outs, self.plan.dtype, alpha)
    }
}

/// The names of the inputs some step reads whole (not as a rank's rows).
fn inputs_read_whole(plan: &Plan, part: &Partition) -> Vec<String> {
    let mut names = Vec::new();
    for entry in &part.schedule {
        let RankStep::Run { step, rows_of, .. } = entry else {
            continue;
        };
        let Some(s) = plan.steps.get(*step) else {
            continue;
        };
        for (k, v) in s.inputs.iter().enumerate() {
            if let Home::Input(name) = &plan.value(*v).home {
                if rows_of.get(k) != Some(&true) && !names.contains(name) {
                    names.push(name.clone());
                }
            }
        }
    }
    names
}

/// Copies the buffers of `arg` (on `from`) onto `to`, through the host.
fn copy_across<B: Backend>(
    from: &B,
    to: &B,
    arg: &Arg<'_, B::Buf>,
) -> Result<Vec<B::Buf>, RuntimeError> {
    arg.buffers()
        .into_iter()
        .map(|b| to.upload(from.download(b)?.as_slice()))
        .collect()
}

/// The name of the input tensor `v` lives in (empty for other values).
fn input_name(v: &Value) -> &str {
    match &v.home {
        Home::Input(name) => name,
        _ => "",
    }
}

/// The error of step `i` on rank `r`, naming both.
fn named(plan: &Plan, i: usize, r: usize, e: RuntimeError) -> RuntimeError {
    let step = &plan.steps[i];
    RuntimeError::Step {
        step: i,
        op: format!("{} on rank {r}", step.op_name()),
        what: step
            .outputs
            .iter()
            .map(|o| plan.value(*o).name.clone())
            .collect::<Vec<_>>()
            .join(", "),
        source: Box::new(e),
    }
}
