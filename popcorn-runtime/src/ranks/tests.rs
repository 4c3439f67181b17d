//! Ranks on backends of their own (as several GPUs are) give the same bits as ranks sharing
//! one backend and as one rank: the inputs a rank reads whole are copied onto its backend, its
//! rows are cut onto it, and the outputs come back to rank 0's backend.

use super::*;
use crate::backend::HostSlice;
use crate::cpu_backend::{CpuBackend, CpuBuffer};
use popcorn_dsl::plan::collective::PartitionSpec;
use popcorn_dsl::{DType, PlannerConfig, Program, Target};
use std::collections::BTreeMap;

const KKM: &str = include_str!("../../../examples/programs/kernel_kmeans.pop");

pub(super) fn program(name: &str) -> Program {
    Program::parse_all(KKM)
        .expect("the example programs parse")
        .into_iter()
        .find(|p| p.name == name)
        .unwrap_or_else(|| panic!("no program `{name}`"))
}

pub(super) fn planned(p: &Program, dims: &DimBindings, ranks: usize) -> Plan {
    let config = PlannerConfig {
        partition: Some(PartitionSpec::points(ranks)),
        ..PlannerConfig::default().with_dtype(DType::F64)
    };
    popcorn_dsl::plan(p, dims, &config, &Target::cpu(2), &BTreeMap::new()).expect("plans")
}

/// Runs `plan` with rank `r` on `backends[r]`; every output (but host scalars) downloaded.
fn outputs_of(
    plan: &Plan,
    backends: &[&CpuBackend],
    inputs: &HashMap<String, Arg<'_, CpuBuffer>>,
    scalars: &ScalarBindings,
    dims: &DimBindings,
) -> BTreeMap<String, HostVec> {
    let home = backends[0];
    let bufs: Vec<(String, CpuBuffer, &Value)> = plan
        .outputs
        .iter()
        .map(|(name, v)| (name, plan.value(*v)))
        .filter(|(_, v)| !matches!(v.home, Home::Host))
        .map(|(name, v)| {
            let buf = home.alloc(elem_of(plan, v), v.len().max(1)).expect("alloc");
            home.fill(&buf, f64::NAN).expect("poison"); // unwritten elements show
            (name.clone(), buf, v)
        })
        .collect();
    let outs: HashMap<String, Arg<'_, CpuBuffer>> = bufs
        .iter()
        .map(|(name, buf, v)| {
            let arg = match v.kind {
                ValueKind::Index => Arg::Index { buf, len: v.len() },
                _ => Arg::Dense {
                    buf,
                    rows: v.rows,
                    cols: v.cols,
                },
            };
            (name.clone(), arg)
        })
        .collect();
    execute(backends, plan, &InMemory, inputs, &outs, scalars, dims).expect("runs");
    bufs.iter()
        .map(|(name, buf, _)| (name.clone(), home.download(buf).expect("download")))
        .collect()
}

/// The inputs of `kkmeans_iteration` over a backend's buffers: `K` (`n x n`) and the labels.
pub(crate) fn iteration_inputs<'a, Buf>(
    kt: &'a Buf,
    lt: &'a Buf,
    n: usize,
) -> HashMap<String, Arg<'a, Buf>> {
    let k = Arg::Dense {
        buf: kt,
        rows: n,
        cols: n,
    };
    [
        ("K".to_string(), k),
        ("labels".to_string(), Arg::Index { buf: lt, len: n }),
    ]
    .into()
}

fn values(len: usize, seed: u64) -> Vec<f64> {
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            (s >> 11) as f64 / (1u64 << 53) as f64
        })
        .collect()
}

#[test]
fn ranks_on_their_own_backends_equal_one_shared_backend_and_one_rank() {
    let p = program("kkmeans_iteration");
    for (n, k) in [(1, 1), (7, 3), (40, 5)] {
        let dims: DimBindings = [("n".to_string(), n), ("k".to_string(), k)].into();
        let home = CpuBackend::new();
        let x = values(n * 2, n as u64 + 1);
        let kernel: Vec<f64> = (0..n * n)
            .map(|i| {
                let (a, b) = (i / n, i % n);
                let d2 = (x[2 * a] - x[2 * b]).powi(2) + (x[2 * a + 1] - x[2 * b + 1]).powi(2);
                (-d2).exp()
            })
            .collect();
        let labels: Vec<u32> = (0..n as u32).map(|i| (i * 7 + 1) % k as u32).collect();
        let kt = home.upload(HostSlice::F64(&kernel)).unwrap();
        let lt = home.upload(HostSlice::U32(&labels)).unwrap();
        let inputs = crate::ranks::tests::iteration_inputs(&kt, &lt, n);
        let scalars = ScalarBindings::new();
        let one = outputs_of(&planned(&p, &dims, 1), &[&home], &inputs, &scalars, &dims);
        for ranks in [2, 3] {
            let plan = planned(&p, &dims, ranks);
            let own: Vec<CpuBackend> = (1..ranks).map(|_| CpuBackend::new()).collect();
            let distinct: Vec<&CpuBackend> = std::iter::once(&home).chain(own.iter()).collect();
            let shared = vec![&home; ranks];
            let a = outputs_of(&plan, &shared, &inputs, &scalars, &dims);
            let b = outputs_of(&plan, &distinct, &inputs, &scalars, &dims);
            assert_eq!(a, one, "n={n} k={k}: {ranks} shared ranks vs one");
            assert_eq!(
                b, one,
                "n={n} k={k}: {ranks} ranks on their own backends vs one"
            );
        }
    }
}

#[test]
fn a_backend_count_other_than_the_rank_count_is_an_error() {
    let p = program("kkmeans_iteration");
    let dims: DimBindings = [("n".to_string(), 4), ("k".to_string(), 2)].into();
    let plan = planned(&p, &dims, 2);
    let home = CpuBackend::new();
    let err = execute(
        &[&home],
        &plan,
        &InMemory,
        &HashMap::new(),
        &HashMap::new(),
        &ScalarBindings::new(),
        &dims,
    )
    .expect_err("one backend for two ranks");
    assert!(err.to_string().contains("2 ranks but 1 backends"), "{err}");
}

#[test]
fn arguments_keep_their_shape_over_other_buffers() {
    let home = CpuBackend::new();
    let a = home.upload(HostSlice::F32(&[1.0; 6])).unwrap();
    let copies = copy_across(
        &home,
        &CpuBackend::new(),
        &Arg::Dense {
            buf: &a,
            rows: 2,
            cols: 3,
        },
    )
    .unwrap();
    let dense: Arg<'_, CpuBuffer> = Arg::Dense {
        buf: &a,
        rows: 2,
        cols: 3,
    };
    match dense.with_buffers(&copies) {
        Some(Arg::Dense {
            buf,
            rows: 2,
            cols: 3,
        }) => {
            assert_eq!(home.download(buf).unwrap(), HostVec::F32(vec![1.0; 6]))
        }
        _ => panic!("a dense argument over its copy"),
    }
    assert!(dense.with_buffers::<CpuBuffer>(&[]).is_none());
    let csr: Arg<'_, CpuBuffer> = Arg::Csr {
        row_ptr: &a,
        col_idx: &a,
        values: &a,
        rows: 1,
        cols: 5,
        nnz: 2,
    };
    assert!(matches!(
        csr.with_buffers(&[1u8, 2, 3]),
        Some(Arg::Csr {
            rows: 1,
            cols: 5,
            nnz: 2,
            ..
        })
    ));
    assert!(csr.with_buffers(&[1u8]).is_none());
}
