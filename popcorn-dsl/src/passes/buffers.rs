//! Buffer planning: gives every temporary value a place, reusing memory whose value is dead.
//!
//! Walking the steps in order, each new temporary takes, in this order of preference:
//! 1. the place of an input of the same step that dies there, when the step is an element-wise
//!    kernel reading that input only at the element it writes (an in-place epilogue);
//! 2. the storage of a program output that is not written until after the temporary dies (or
//!    is written in place from it);
//! 3. the smallest free plan buffer of the same element type that is large enough;
//! 4. a new plan buffer.
//!
//! The result of a builtin that is only a scratch copy for its consumer
//! ([`OpFacts::scratch_result`]) gets a buffer of its own, marked
//! [transient](crate::plan::Buffer::transient): allocated for each run instead of kept.

use super::{PassContext, PlanError, PlanPass};
use crate::ops::OpFacts;
use crate::plan::{Buffer, BufferId, Elem, Home, Plan, StepOp, ValueId, ValueKind};
use kernel_ir::{Access, OutputShape};
use std::collections::HashMap;

/// The buffer pass.
pub struct Buffers;

impl PlanPass for Buffers {
    fn name(&self) -> &'static str {
        "buffers"
    }

    fn run(&self, plan: &mut Plan, _cx: &PassContext<'_>) -> Result<bool, PlanError> {
        assign(plan);
        Ok(true)
    }
}

/// Whether step `s` writes a scratch copy (see [`OpFacts::scratch_result`]).
fn writes_scratch(plan: &Plan, s: usize) -> bool {
    matches!(&plan.steps[s].op, StepOp::Builtin(b) if b.scratch_result())
}

/// The storage of one program output, lent to temporaries until the output is written.
struct OutputSlot {
    /// The output's name.
    name: String,
    /// Its element type.
    elem: Elem,
    /// Its length.
    len: usize,
    /// The step that writes it.
    defined_at: usize,
    /// The step intervals during which temporaries hold it.
    busy: Vec<(usize, usize)>,
}

impl OutputSlot {
    /// Whether temporary `t`, last used at step `hi`, is dead before the output is written (or
    /// is what the output is written from, in place).
    fn outlived_by(&self, plan: &Plan, hi: usize, t: ValueId) -> bool {
        hi < self.defined_at || (hi == self.defined_at && in_place_target(plan, self.defined_at, t))
    }

    /// Whether temporary `t`, alive over steps `lo..=hi`, may move in: outlived by the output
    /// and overlapping no other tenant.
    fn admits(&self, plan: &Plan, lo: usize, hi: usize, t: ValueId) -> bool {
        self.outlived_by(plan, hi, t) && self.busy.iter().all(|(a, b)| hi < *a || lo > *b)
    }
}

/// Where a value of one element type lives.
#[derive(Clone, Debug, PartialEq)]
enum Place {
    Buffer(BufferId),
    Output(String),
}

/// The element type and length of the single storage of a dense or index value.
fn storage(plan: &Plan, v: ValueId) -> Option<(Elem, usize)> {
    let val = plan.value(v);
    match val.kind {
        ValueKind::Dense => Some((val.held.map_or(Elem::Float, Elem::Half), val.len())),
        ValueKind::Index => Some((Elem::U32, val.rows)),
        _ => None,
    }
}

/// Whether step `s` may write output `o` over input `u`: an element-wise kernel that reads `u`
/// only at the element it writes, `o` being a full-size output of the same storage.
fn in_place_ok(plan: &Plan, s: usize, u: ValueId, o: ValueId) -> bool {
    let step = &plan.steps[s];
    // Only element-wise maps: each element is read and then written by the same thread, and
    // nothing reads the input again afterwards (a row kernel's gather may, so it never works in
    // place). Map kernels are generated without `__restrict__` for this reason.
    let StepOp::Fused(f) = &step.op else {
        return false;
    };
    if !matches!(f.spec.form, kernel_ir::Form::Map { .. }) {
        return false;
    }
    let Some(oi) = step.outputs.iter().position(|x| *x == o) else {
        return false;
    };
    if f.spec.outputs().get(oi) != Some(&OutputShape::Full) || storage(plan, u) != storage(plan, o)
    {
        return false;
    }
    let mut read = false;
    for (k, inp) in step.inputs.iter().enumerate() {
        if *inp == u {
            // A lower-symmetric input is read by the tile-pair template, which stages each
            // lower tile in shared memory before writing the two output tiles it stands for,
            // and never reads the upper half.
            let same_place = matches!(
                f.spec.inputs[k].access,
                Access::Matrix { transposed: false } | Access::LowerSymmetric
            );
            if !same_place {
                return false;
            }
            read = true;
        }
    }
    read
}

/// Assigns places to every temporary of `plan` and fills `plan.buffers`.
pub fn assign(plan: &mut Plan) {
    let nsteps = plan.steps.len();
    let mut def: HashMap<ValueId, usize> = HashMap::new();
    let mut last: HashMap<ValueId, usize> = HashMap::new();
    for (s, step) in plan.steps.iter().enumerate() {
        for o in &step.outputs {
            def.entry(*o).or_insert(s);
            last.entry(*o).or_insert(s);
        }
        // A pipeline's producer still reads its inputs while its consumer, the next step,
        // writes: they live through that step too.
        let reads_until = plan.reads_until(s);
        for i in &step.inputs {
            last.insert(*i, reads_until);
        }
    }
    let mut slots: Vec<OutputSlot> = Vec::new();
    for (name, v) in &plan.outputs {
        if let (Home::Output(_), Some((elem, len))) = (&plan.value(*v).home, storage(plan, *v)) {
            slots.push(OutputSlot {
                name: name.clone(),
                elem,
                len,
                defined_at: def.get(v).copied().unwrap_or(nsteps),
                busy: Vec::new(),
            });
        }
    }
    let mut buffers: Vec<Buffer> = Vec::new();
    let mut free: Vec<BufferId> = Vec::new();
    let mut place: HashMap<ValueId, Place> = HashMap::new();
    let mut homes: HashMap<ValueId, Home> = HashMap::new();

    let take_free = |free: &mut Vec<BufferId>,
                     buffers: &mut Vec<Buffer>,
                     elem: Elem,
                     len: usize,
                     v: ValueId|
     -> BufferId {
        let best = free
            .iter()
            .enumerate()
            .filter(|(_, b)| buffers[b.0].elem == elem && buffers[b.0].len >= len)
            .min_by_key(|(_, b)| buffers[b.0].len)
            .map(|(i, _)| i);
        let id = match best {
            Some(i) => free.remove(i),
            None => {
                buffers.push(Buffer {
                    elem,
                    len,
                    holds: Vec::new(),
                    transient: false,
                });
                BufferId(buffers.len() - 1)
            }
        };
        buffers[id.0].holds.push(v);
        id
    };

    for s in 0..nsteps {
        let step = plan.steps[s].clone();
        let mut transferred: Vec<ValueId> = Vec::new();
        for &o in &step.outputs {
            if !matches!(plan.value(o).home, Home::Temp(_)) {
                // An output written in place over a temporary that already lives in its storage
                // needs nothing; anything else is the caller's storage.
                for &u in &step.inputs {
                    if place.get(&u) == Some(&Place::Output(name_of(plan, o)))
                        && last.get(&u) == Some(&s)
                    {
                        transferred.push(u);
                    }
                }
                continue;
            }
            if let ValueKind::Csr { nnz } = plan.value(o).kind {
                let val = plan.value(o);
                let nnz = nnz.unwrap_or(val.cols);
                let ids = vec![
                    take_free(&mut free, &mut buffers, Elem::I32, val.rows + 1, o),
                    take_free(&mut free, &mut buffers, Elem::I32, nnz, o),
                    take_free(&mut free, &mut buffers, Elem::Float, nnz, o),
                ];
                homes.insert(o, Home::Temp(ids));
                continue;
            }
            let Some((elem, len)) = storage(plan, o) else {
                continue;
            };
            let lo = s;
            let hi = last.get(&o).copied().unwrap_or(s);
            // 1. in place over a dying input
            let inplace = step.inputs.iter().copied().find(|u| {
                last.get(u) == Some(&s)
                    && place.contains_key(u)
                    && !transferred.contains(u)
                    && in_place_ok(plan, s, *u, o)
            });
            // Taking over a place in an output's storage is only possible if the new value also
            // dies before that output is written (or is what the output is written from).
            let fits_slot = |p: &Place| match p {
                Place::Buffer(_) => true,
                Place::Output(name) => slots
                    .iter()
                    .find(|x| &x.name == name)
                    .is_some_and(|slot| slot.outlived_by(plan, hi, o)),
            };
            let inplace = inplace.filter(|u| fits_slot(&place[u]));
            if let Some(u) = inplace {
                let p = place[&u].clone();
                transferred.push(u);
                if let Place::Output(name) = &p {
                    if let Some(slot) = slots.iter_mut().find(|x| &x.name == name) {
                        slot.busy.push((lo, hi));
                    }
                }
                set_place(&mut buffers, &mut homes, &mut place, o, p);
                continue;
            }
            // 2. an output's storage, free over [lo, hi]
            let slot = slots
                .iter_mut()
                .find(|s| s.elem == elem && s.len >= len && s.admits(plan, lo, hi, o));
            if let Some(slot) = slot {
                slot.busy.push((lo, hi));
                let p = Place::Output(slot.name.clone());
                set_place(&mut buffers, &mut homes, &mut place, o, p);
                continue;
            }
            // A scratch copy: a transient buffer of its own.
            if writes_scratch(plan, s) {
                buffers.push(Buffer {
                    elem,
                    len,
                    holds: vec![o],
                    transient: true,
                });
                let id = BufferId(buffers.len() - 1);
                place.insert(o, Place::Buffer(id));
                homes.insert(o, Home::Temp(vec![id]));
                continue;
            }
            // 3./4. a free or new plan buffer
            let id = take_free(&mut free, &mut buffers, elem, len, o);
            place.insert(o, Place::Buffer(id));
            homes.insert(o, Home::Temp(vec![id]));
        }
        // Release what dies here (unless an output of this step took it over).
        let mut dying: Vec<ValueId> = step.inputs.clone();
        dying.extend(step.outputs.iter().copied());
        dying.sort();
        dying.dedup();
        for v in dying {
            if last.get(&v) != Some(&s) || transferred.contains(&v) {
                continue;
            }
            if let Some(Home::Temp(ids)) = homes.get(&v) {
                for id in ids {
                    if !free.contains(id) && !buffers[id.0].transient {
                        free.push(*id);
                    }
                }
            }
        }
    }
    for (v, h) in homes {
        plan.values[v.0].home = h;
    }
    plan.buffers = buffers;
}

fn name_of(plan: &Plan, v: ValueId) -> String {
    match &plan.value(v).home {
        Home::Output(n) => n.clone(),
        _ => String::new(),
    }
}

/// Whether output-defining step `d` can write its output over temporary `t` in place.
fn in_place_target(plan: &Plan, d: usize, t: ValueId) -> bool {
    let step = &plan.steps[d];
    step.outputs
        .iter()
        .any(|o| matches!(plan.value(*o).home, Home::Output(_)) && in_place_ok(plan, d, t, *o))
}

fn set_place(
    buffers: &mut [Buffer],
    homes: &mut HashMap<ValueId, Home>,
    place: &mut HashMap<ValueId, Place>,
    v: ValueId,
    p: Place,
) {
    match &p {
        Place::Buffer(id) => {
            buffers[id.0].holds.push(v);
            homes.insert(v, Home::Temp(vec![*id]));
        }
        Place::Output(name) => {
            homes.insert(v, Home::InOutput(name.clone()));
        }
    }
    place.insert(v, p);
}
