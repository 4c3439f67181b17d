//! The launcher's environment, the host channel between processes (threads here, each with
//! its own channel end, as processes would have), failures reaching every rank, and a
//! partitioned plan run one rank per "process" giving one process's results bit for bit.

use super::*;
use crate::backend::HostSlice;
use crate::cpu_backend::{CpuBackend, CpuBuffer};
use crate::ranks::{execute_ranked, execute_ranked_local, InMemory, RankInput};
use popcorn_dsl::plan::collective::PartitionSpec;
use popcorn_dsl::{DType, DimBindings, PlannerConfig, Program, ScalarBindings, Target};
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

fn vars<'a>(pairs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<String> + 'a {
    move |name| {
        pairs
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.to_string())
    }
}

#[test]
fn the_launchers_variables_give_the_rank_the_size_and_the_rendezvous() {
    assert_eq!(World::from_vars(vars(&[])).unwrap(), None);
    let w = World::from_vars(vars(&[
        ("OMPI_COMM_WORLD_RANK", "1"),
        ("OMPI_COMM_WORLD_SIZE", "2"),
        ("OMPI_COMM_WORLD_LOCAL_RANK", "1"),
        ("POPCORN_RENDEZVOUS", "/tmp/r"),
    ]))
    .unwrap()
    .unwrap();
    assert_eq!((w.rank, w.size, w.local_rank), (1, 2, 1));
    assert_eq!(w.rendezvous, Rendezvous::File("/tmp/r".into()));
    assert_eq!(w.source, "OMPI_COMM_WORLD_RANK");
    let w = World::from_vars(vars(&[
        ("RANK", "0"),
        ("WORLD_SIZE", "4"),
        ("MASTER_ADDR", "10.0.0.1"),
        ("MASTER_PORT", "29500"),
    ]))
    .unwrap()
    .unwrap();
    assert_eq!(w.rendezvous, Rendezvous::Address("10.0.0.1:29500".into()));
    assert_eq!(w.local_rank, 0);
    // One process is no world.
    assert_eq!(
        World::from_vars(vars(&[("RANK", "0"), ("WORLD_SIZE", "1")])).unwrap(),
        None
    );
    let err = |pairs: &[(&str, &str)]| World::from_vars(vars(pairs)).unwrap_err().to_string();
    assert!(err(&[("POPCORN_RANK", "0")]).contains("POPCORN_WORLD_SIZE is not"));
    // Another program's `RANK` without a size is no run of popcorn's.
    assert_eq!(World::from_vars(vars(&[("RANK", "3")])).unwrap(), None);
    assert!(err(&[("RANK", "3"), ("WORLD_SIZE", "2")]).contains("not below"));
    assert!(err(&[("RANK", "x"), ("WORLD_SIZE", "2")]).contains("RANK=x"));
    let e = err(&[("RANK", "1"), ("WORLD_SIZE", "2")]);
    assert!(
        e.contains("POPCORN_RENDEZVOUS") && e.contains("MASTER_ADDR"),
        "{e}"
    );
}

/// A fresh rendezvous file path for one test.
fn rendezvous(tag: &str) -> Rendezvous {
    let path =
        std::env::temp_dir().join(format!("popcorn-world-{}-{tag}.addr", std::process::id()));
    let _ = std::fs::remove_file(&path);
    Rendezvous::File(path)
}

fn world(rank: usize, size: usize, rendezvous: &Rendezvous) -> World {
    World {
        rank,
        size,
        local_rank: rank,
        rendezvous: rendezvous.clone(),
        source: "test".into(),
    }
}

/// Runs `body(rank, channel)` on `size` threads, each its own end of a channel.
fn on_ranks<T: Send + 'static>(
    size: usize,
    tag: &str,
    body: impl Fn(usize, Arc<HostChannel>) -> T + Send + Sync + 'static,
) -> Vec<T> {
    on_ranks_waiting(size, tag, Duration::from_secs(20), body)
}

/// [`on_ranks`], each rank waiting at most `timeout` for the others.
fn on_ranks_waiting<T: Send + 'static>(
    size: usize,
    tag: &str,
    timeout: Duration,
    body: impl Fn(usize, Arc<HostChannel>) -> T + Send + Sync + 'static,
) -> Vec<T> {
    let rv = rendezvous(tag);
    let body = Arc::new(body);
    let threads: Vec<_> = (0..size)
        .map(|r| {
            let (rv, body) = (rv.clone(), body.clone());
            std::thread::spawn(move || {
                let w = world(r, size, &rv);
                let channel = HostChannel::connect(&w, timeout).expect("connect");
                body(r, Arc::new(channel))
            })
        })
        .collect();
    threads
        .into_iter()
        .map(|t| t.join().expect("a rank"))
        .collect()
}

#[test]
fn every_rank_gets_every_ranks_bytes_in_rank_order() {
    let got = on_ranks(3, "gather", |r, ch| {
        let first = ch.all_gather(&vec![r as u8; r + 1]).unwrap();
        let second = ch.broadcast(&[42, r as u8]).unwrap();
        (first, second)
    });
    for (first, second) in got {
        assert_eq!(first, vec![vec![0], vec![1, 1], vec![2, 2, 2]]);
        assert_eq!(second, vec![42, 0]);
    }
}

#[test]
fn a_failing_rank_stops_every_rank_naming_itself() {
    let got = on_ranks(3, "failure", |r, ch| {
        if r == 2 {
            ch.abandon("out of memory on its device");
            return "abandoned".to_string();
        }
        let first = ch.all_gather(&[r as u8]).unwrap_err().to_string();
        let later = ch.all_gather(&[r as u8]).unwrap_err().to_string();
        format!("{first} | {later}")
    });
    for (r, text) in got.iter().enumerate().take(2) {
        assert!(
            text.contains("rank 2 failed: out of memory on its device"),
            "rank {r}: {text}"
        );
        assert!(text.contains("stopped earlier"), "rank {r}: {text}");
    }
}

#[test]
fn a_rank_that_exits_is_named_by_the_others() {
    let got = on_ranks(3, "exit", |r, ch| {
        if r == 1 {
            drop(ch); // the process went away
            return String::new();
        }
        ch.all_gather(&[r as u8]).unwrap_err().to_string()
    });
    assert!(
        got[0].contains("rank 1 closed its connection"),
        "{}",
        got[0]
    );
    assert!(
        got[2].contains("rank 1 closed its connection"),
        "{}",
        got[2]
    );
}

/// A rank that stops answering (stuck, not exited) is named by every other rank once the
/// timeout passes: no rank waits for ever.
#[test]
fn a_rank_that_stops_answering_is_named_after_the_timeout() {
    let start = std::time::Instant::now();
    let got = on_ranks_waiting(3, "stuck", Duration::from_secs(2), |r, ch| {
        if r == 2 {
            std::thread::sleep(Duration::from_secs(6)); // stuck, the connection still open
            return String::new();
        }
        ch.all_gather(&[r as u8]).unwrap_err().to_string()
    });
    assert!(got[0].contains("rank 2 did not answer"), "{}", got[0]);
    assert!(got[1].contains("rank 2 did not answer"), "{}", got[1]);
    assert!(
        start.elapsed() < Duration::from_secs(12),
        "{:?}",
        start.elapsed()
    );
}

const KKM: &str = include_str!("../../../../examples/programs/kernel_kmeans.pop");

/// The iteration's inputs, whole: `K` (`n x n`) and the labels.
fn whole_inputs<'a>(
    kt: &'a CpuBuffer,
    lt: &'a CpuBuffer,
    n: usize,
) -> HashMap<String, RankInput<'a, CpuBuffer>> {
    crate::ranks::tests::iteration_inputs(kt, lt, n)
        .into_iter()
        .map(|(name, arg)| (name, RankInput::Whole(arg)))
        .collect()
}

/// A Kernel K-means iteration run by three "processes", one rank each, through the host
/// channel: each rank's labels are its rows of one process's, the objective and the changed
/// count the same bits.
#[test]
fn a_plan_run_one_rank_per_process_equals_one_process() {
    let program = Program::parse_all(KKM)
        .unwrap()
        .into_iter()
        .find(|p| p.name == "kkmeans_iteration")
        .unwrap();
    let (n, k, size) = (101, 4, 3);
    let dims: DimBindings = [("n".to_string(), n), ("k".to_string(), k)].into();
    let config = PlannerConfig {
        partition: Some(PartitionSpec::points(size)),
        ..PlannerConfig::default().with_dtype(DType::F64)
    };
    let plan = Arc::new(
        popcorn_dsl::plan(&program, &dims, &config, &Target::cpu(2), &BTreeMap::new()).unwrap(),
    );
    let kernel: Vec<f64> = (0..n * n)
        .map(|i| (-(((i / n) as f64 - (i % n) as f64) / 9.0).powi(2)).exp())
        .collect();
    let labels: Vec<u32> = (0..n as u32).map(|i| (i * 3 + 1) % k as u32).collect();
    // Read back what a run leaves on rank `r`: its rows of the labels, the scalars whole.
    let read = |b: &CpuBackend, out: &crate::ranks::RankedOutputs<CpuBuffer>, r: usize| {
        let rows = |name: &str| {
            let held = &out[name][r];
            let buf = held.rows.as_ref().or(held.whole.as_ref()).unwrap();
            b.download(&buf[0]).unwrap().to_f64()
        };
        let scalar = |name: &str| {
            let held = &out[name][r];
            b.download(&held.whole.as_ref().unwrap()[0])
                .unwrap()
                .to_f64()[0]
                .to_bits()
        };
        let l = rows("new_labels");
        (l, scalar("objective"), scalar("changed"))
    };
    // One process, three ranks in memory.
    let home = CpuBackend::new();
    let kt = home.upload(HostSlice::F64(&kernel)).unwrap();
    let lt = home.upload(HostSlice::U32(&labels)).unwrap();
    let inputs = whole_inputs(&kt, &lt, n);
    let out = execute_ranked(
        &[&home, &home, &home],
        &plan,
        &InMemory,
        &inputs,
        &ScalarBindings::new(),
        &dims,
    )
    .unwrap();
    let want: Vec<_> = (0..size).map(|r| read(&home, &out, r)).collect();
    // Three "processes".
    let (plan2, dims2, kernel2, labels2) = (plan.clone(), dims.clone(), kernel.clone(), labels);
    let got = on_ranks(size, "plan", move |r, ch| {
        let b = CpuBackend::new();
        let kt = b.upload(HostSlice::F64(&kernel2)).unwrap();
        let lt = b.upload(HostSlice::U32(&labels2)).unwrap();
        let inputs = whole_inputs(&kt, &lt, n);
        let collectives = WorldCollectives::new(ch);
        let out = execute_ranked_local(
            &[(r, &b)],
            &plan2,
            &collectives,
            &inputs,
            &ScalarBindings::new(),
            &dims2,
            &crate::ranks::SpareBuffers::new(),
        )
        .unwrap();
        assert!(out["new_labels"]
            .iter()
            .enumerate()
            .all(|(q, h)| q == r || (h.rows.is_none() && h.whole.is_none())));
        read(&b, &out, r)
    });
    assert_eq!(got, want);
}
