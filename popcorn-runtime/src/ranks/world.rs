//! A run spread over processes, one rank each (one per GPU, started by `mpirun`, `srun` or
//! `torchrun`): this process's rank and the run's size from the launcher's environment
//! ([`World::from_env`]), and a host channel between the processes ([`HostChannel`]): every
//! process connects to rank 0, found through a rendezvous file or `MASTER_ADDR`/`MASTER_PORT`.
//!
//! The channel carries what the ranks exchange on the host: the CPU ranks' all-gathers and
//! all-reduces ([`WorldCollectives`]), NCCL's unique id for the GPU ranks, tensors read back,
//! and failures. Rank 0 relays: every exchange goes through it, in rank order, so results are
//! the same as one process's in-memory ranks give, bit for bit. A rank whose run fails tells
//! rank 0, which tells every other rank; a rank that exits or stops answering for
//! `POPCORN_RANK_TIMEOUT` seconds is named in every other rank's error. None waits for ever.

use super::collective::{concatenated, prefix, summed, write_prefix, Combine};
use super::{Collectives, Gather};
use crate::backend::{Backend, HostVec};
use crate::error::RuntimeError;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// This process's place in a run of several processes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct World {
    /// This process's rank, `0..size`.
    pub rank: usize,
    /// The number of processes (ranks).
    pub size: usize,
    /// Its rank among the processes of its machine (which GPU it takes).
    pub local_rank: usize,
    /// Where the processes meet.
    pub rendezvous: Rendezvous,
    /// The variable the rank was read from, for messages.
    pub source: String,
}

/// Where the processes of a run find rank 0.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Rendezvous {
    /// Rank 0 listens on a free port and writes `host:port` into this file, which every other
    /// rank reads (a file all processes see: one machine, or a shared file system).
    File(PathBuf),
    /// Rank 0 listens at this address (`MASTER_ADDR:MASTER_PORT`), which every rank knows.
    Address(String),
}

/// The launchers' variables for the rank, the size and the local rank, in the order they are
/// looked at (popcorn's own first).
const LAUNCHERS: [(&str, &str, &str); 6] = [
    ("POPCORN_RANK", "POPCORN_WORLD_SIZE", "POPCORN_LOCAL_RANK"),
    (
        "OMPI_COMM_WORLD_RANK",
        "OMPI_COMM_WORLD_SIZE",
        "OMPI_COMM_WORLD_LOCAL_RANK",
    ),
    ("PMIX_RANK", "PMIX_SIZE", "MPI_LOCALRANKID"),
    ("PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID"),
    ("SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"),
    ("RANK", "WORLD_SIZE", "LOCAL_RANK"),
];

impl World {
    /// The run this process belongs to, from the launcher's environment: `None` when it was
    /// not started as one of several processes (no launcher variables, or a size of 1).
    pub fn from_env() -> Result<Option<World>, RuntimeError> {
        World::from_vars(|name| std::env::var(name).ok())
    }

    /// [`World::from_env`] from a variable lookup.
    pub fn from_vars(get: impl Fn(&str) -> Option<String>) -> Result<Option<World>, RuntimeError> {
        let value = |name: &str| get(name).filter(|v| !v.trim().is_empty());
        let Some((rank_var, size_var, local_var)) =
            LAUNCHERS.into_iter().find(|(r, _, _)| value(r).is_some())
        else {
            return Ok(None);
        };
        let number = |name: &str| -> Result<Option<usize>, RuntimeError> {
            value(name)
                .map(|v| {
                    v.trim().parse::<usize>().map_err(|_| {
                        RuntimeError::Device(format!("{name}={v} is not a rank or a count"))
                    })
                })
                .transpose()
        };
        let rank = number(rank_var)?.unwrap_or(0);
        let Some(size) = number(size_var)? else {
            // A launcher's rank without its size is not a run popcorn joins (`RANK` alone may
            // mean something else); popcorn's own variables must come together.
            if rank_var.starts_with("POPCORN_") {
                return Err(RuntimeError::Device(format!(
                    "{rank_var} is set but {size_var} is not: popcorn needs both to run as one \
                     of several processes"
                )));
            }
            return Ok(None);
        };
        if size <= 1 {
            return Ok(None);
        }
        if rank >= size {
            return Err(RuntimeError::Device(format!(
                "{rank_var}={rank} is not below {size_var}={size}"
            )));
        }
        let local_rank = number(local_var)?.unwrap_or(rank);
        let rendezvous = match (
            value("POPCORN_RENDEZVOUS"),
            value("MASTER_ADDR"),
            value("MASTER_PORT"),
        ) {
            (Some(file), _, _) => Rendezvous::File(PathBuf::from(file)),
            (None, Some(addr), Some(port)) => Rendezvous::Address(format!("{addr}:{port}")),
            _ => {
                return Err(RuntimeError::Device(format!(
                    "this process is rank {rank} of {size} ({rank_var}) but no rendezvous was \
                     given: set POPCORN_RENDEZVOUS to a file every process sees, or MASTER_ADDR \
                     and MASTER_PORT to an address rank 0 can listen on"
                )))
            }
        };
        Ok(Some(World {
            rank,
            size,
            local_rank,
            rendezvous,
            source: rank_var.to_string(),
        }))
    }
}

/// The host channel of this process's run over several processes: made once, by the first
/// context, and shared by every later one (the processes make their contexts in the same
/// order, so their exchanges meet). Each side waits `POPCORN_RANK_TIMEOUT` seconds (default
/// 600) for the others to connect.
pub fn process_channel(world: &World) -> Result<Arc<HostChannel>, RuntimeError> {
    static CHANNEL: Mutex<Option<Arc<HostChannel>>> = Mutex::new(None);
    let mut channel = CHANNEL
        .lock()
        .map_err(|_| RuntimeError::Device("the host channel's lock is poisoned".into()))?;
    if let Some(c) = channel.as_ref() {
        return Ok(c.clone());
    }
    let made = Arc::new(HostChannel::connect(world, super::rank_timeout())?);
    *channel = Some(made.clone());
    Ok(made)
}

/// Where this process is one rank of a run over several: tells the other ranks that it failed
/// with `why` (connecting first if no context has yet), so that they stop with an error naming
/// it instead of waiting for it. A program calls this before it exits on an error.
pub fn abandon_process_run(why: &str) {
    if let Ok(Some(world)) = World::from_env() {
        if let Ok(channel) = process_channel(&world) {
            channel.abandon(why);
        }
    }
}

/// Frame tags on the channel.
const DATA: u8 = 0;
const FAILURE: u8 = 1;

/// One frame: a tag and its bytes.
fn send_frame(stream: &mut TcpStream, tag: u8, bytes: &[u8]) -> std::io::Result<()> {
    // One write per frame: the exchanges are small and answered at once, so a frame split in
    // two would wait on the peer's delayed acknowledgement.
    let mut frame = Vec::with_capacity(9 + bytes.len());
    frame.push(tag);
    frame.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
    frame.extend_from_slice(bytes);
    stream.write_all(&frame)?;
    stream.flush()
}

/// A connection set up for the channel: blocking, answering small messages at once (no
/// Nagle delay), reads giving up after `timeout`.
fn prepare(stream: &TcpStream, timeout: Duration) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    stream.set_nodelay(true)?;
    stream.set_read_timeout(Some(timeout))
}

fn read_frame(stream: &mut TcpStream) -> std::io::Result<(u8, Vec<u8>)> {
    let mut head = [0u8; 9];
    stream.read_exact(&mut head)?;
    let mut len = [0u8; 8];
    len.copy_from_slice(&head[1..]);
    let len = u64::from_le_bytes(len) as usize;
    let mut bytes = vec![0u8; len];
    stream.read_exact(&mut bytes)?;
    Ok((head[0], bytes))
}

/// Byte lists as one frame: the count, then each length and its bytes.
fn pack(lists: &[Vec<u8>]) -> Vec<u8> {
    let mut out = (lists.len() as u64).to_le_bytes().to_vec();
    for l in lists {
        out.extend_from_slice(&(l.len() as u64).to_le_bytes());
        out.extend_from_slice(l);
    }
    out
}

fn unpack(bytes: &[u8]) -> Option<Vec<Vec<u8>>> {
    let mut at = 0usize;
    let word = |at: &mut usize| -> Option<usize> {
        let w = bytes.get(*at..*at + 8)?;
        *at += 8;
        Some(u64::from_le_bytes(w.try_into().ok()?) as usize)
    };
    let count = word(&mut at)?;
    let mut lists = Vec::with_capacity(count.min(1 << 16));
    for _ in 0..count {
        let len = word(&mut at)?;
        lists.push(bytes.get(at..at + len)?.to_vec());
        at += len;
    }
    Some(lists)
}

/// The connections of one process: rank 0 holds one to every other rank (by rank), the
/// others one to rank 0.
pub struct HostChannel {
    rank: usize,
    size: usize,
    peers: Mutex<Vec<Option<TcpStream>>>,
    /// Why the channel stopped, once it did.
    stopped: Mutex<Option<String>>,
    /// The rendezvous file rank 0 wrote (removed when the channel goes).
    written: Option<PathBuf>,
}

impl HostChannel {
    /// Connects this process to the others of `world`: rank 0 listens and accepts every other
    /// rank, the others connect to it; each side waits at most `timeout` for the others.
    pub fn connect(world: &World, timeout: Duration) -> Result<HostChannel, RuntimeError> {
        let deadline = Instant::now() + timeout;
        let mut peers: Vec<Option<TcpStream>> = (0..world.size).map(|_| None).collect();
        let mut written = None;
        if world.rank == 0 {
            let listener = match &world.rendezvous {
                Rendezvous::Address(addr) => TcpListener::bind(addr.as_str()),
                Rendezvous::File(_) => TcpListener::bind("0.0.0.0:0"),
            }
            .map_err(|e| io_error("rank 0 could not listen for the other ranks", e))?;
            if let Rendezvous::File(path) = &world.rendezvous {
                let port = listener
                    .local_addr()
                    .map_err(|e| io_error("rank 0's address", e))?
                    .port();
                let host = std::env::var("POPCORN_HOST").unwrap_or_else(|_| "127.0.0.1".into());
                write_atomically(path, &format!("{host}:{port}\n"))?;
                written = Some(path.clone());
            }
            listener
                .set_nonblocking(true)
                .map_err(|e| io_error("rank 0's listener", e))?;
            let mut missing = world.size - 1;
            while missing > 0 {
                match listener.accept() {
                    Ok((mut stream, _)) => {
                        prepare(&stream, timeout)
                            .map_err(|e| io_error("a rank's connection", e))?;
                        let (_, hello) = read_frame(&mut stream)
                            .map_err(|e| io_error("a rank's greeting", e))?;
                        let (rank, size) = greeting(&hello).ok_or_else(|| {
                            RuntimeError::Device("a rank's greeting is malformed".into())
                        })?;
                        if size != world.size || rank == 0 || rank >= size {
                            return Err(RuntimeError::Device(format!(
                                "a process greeted rank 0 as rank {rank} of {size}; this run \
                                 has {} ranks (another run's process on the same rendezvous?)",
                                world.size
                            )));
                        }
                        if peers[rank].replace(stream).is_none() {
                            missing -= 1;
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        if Instant::now() > deadline {
                            let absent: Vec<String> = (1..world.size)
                                .filter(|r| peers[*r].is_none())
                                .map(|r| format!("rank {r}"))
                                .collect();
                            return Err(RuntimeError::Device(format!(
                                "rank 0 waited {} s for {} to connect (not started, or failed \
                                 before it joined)",
                                timeout.as_secs_f64(),
                                absent.join(", ")
                            )));
                        }
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    Err(e) => return Err(io_error("rank 0 accepting the other ranks", e)),
                }
            }
        } else {
            let mut stream = loop {
                let attempt = address(&world.rendezvous)
                    .and_then(|addr| TcpStream::connect(addr.as_str()).map_err(|e| e.to_string()));
                match attempt {
                    Ok(s) => break s,
                    Err(why) if Instant::now() > deadline => {
                        return Err(RuntimeError::Device(format!(
                            "rank {} could not reach rank 0 within {} s: {why}",
                            world.rank,
                            timeout.as_secs_f64()
                        )))
                    }
                    Err(_) => std::thread::sleep(Duration::from_millis(10)),
                }
            };
            // Rank 0 waits `timeout` for each rank and relays; the others wait on it longer,
            // so that rank 0's word on a rank that stopped answering reaches them first
            // (with equal waits they could give up on rank 0 itself).
            let relay_wait = timeout * 2 + Duration::from_secs(5);
            prepare(&stream, relay_wait).map_err(|e| io_error("the connection to rank 0", e))?;
            let mut hello = (world.rank as u64).to_le_bytes().to_vec();
            hello.extend_from_slice(&(world.size as u64).to_le_bytes());
            send_frame(&mut stream, DATA, &hello).map_err(|e| io_error("greeting rank 0", e))?;
            peers[0] = Some(stream);
        }
        Ok(HostChannel {
            rank: world.rank,
            size: world.size,
            peers: Mutex::new(peers),
            stopped: Mutex::new(None),
            written,
        })
    }

    /// This process's rank.
    pub fn rank(&self) -> usize {
        self.rank
    }

    /// The number of ranks.
    pub fn size(&self) -> usize {
        self.size
    }

    /// Every rank's `mine`, in rank order, on every rank.
    pub fn all_gather(&self, mine: &[u8]) -> Result<Vec<Vec<u8>>, RuntimeError> {
        self.usable()?;
        let mut peers = self.peers.lock().map_err(|_| poisoned())?;
        if self.rank != 0 {
            let stream = peers[0].as_mut().ok_or_else(poisoned)?;
            send_frame(stream, DATA, mine).map_err(|e| self.lost(0, e))?;
            let lists = self.receive(stream, 0)?;
            return unpack(&lists).ok_or_else(|| malformed(0));
        }
        let mut lists = vec![mine.to_vec()];
        for r in 1..self.size {
            let stream = peers[r].as_mut().ok_or_else(poisoned)?;
            match self.receive(stream, r) {
                Ok(bytes) => lists.push(bytes),
                Err(e) => {
                    drop(peers);
                    self.tell_all(&e.to_string());
                    return Err(e);
                }
            }
        }
        let packed = pack(&lists);
        for r in 1..self.size {
            let stream = peers[r].as_mut().ok_or_else(poisoned)?;
            send_frame(stream, DATA, &packed).map_err(|e| self.lost(r, e))?;
        }
        Ok(lists)
    }

    /// Rank 0's `bytes` on every rank (other ranks pass anything; it is not read).
    pub fn broadcast(&self, bytes: &[u8]) -> Result<Vec<u8>, RuntimeError> {
        let all = self.all_gather(if self.rank == 0 { bytes } else { &[] })?;
        all.into_iter().next().ok_or_else(|| malformed(0))
    }

    /// Tells the other ranks this process's run failed with `why`: a rank other than 0 tells
    /// rank 0, which tells everyone at its next exchange; rank 0 tells everyone now.
    pub fn abandon(&self, why: &str) {
        let message = format!("rank {} failed: {why}", self.rank);
        if self.rank == 0 {
            self.tell_all(&message);
        } else if let Ok(mut peers) = self.peers.lock() {
            if let Some(stream) = peers[0].as_mut() {
                let _ = send_frame(stream, FAILURE, message.as_bytes());
            }
        }
        self.stop(message);
    }

    /// Rank 0: sends `message` as a failure to every other rank, and stops.
    fn tell_all(&self, message: &str) {
        if let Ok(mut peers) = self.peers.lock() {
            for stream in peers.iter_mut().skip(1).flatten() {
                let _ = send_frame(stream, FAILURE, message.as_bytes());
            }
        }
        self.stop(message.to_string());
    }

    fn stop(&self, why: String) {
        if let Ok(mut stopped) = self.stopped.lock() {
            stopped.get_or_insert(why);
        }
    }

    fn usable(&self) -> Result<(), RuntimeError> {
        match self.stopped.lock().map_err(|_| poisoned())?.as_ref() {
            None => Ok(()),
            Some(why) => Err(RuntimeError::Device(format!(
                "the run's ranks were stopped earlier ({why})"
            ))),
        }
    }

    /// The next data frame from rank `from`: a failure frame or a lost connection is an
    /// error naming the rank.
    fn receive(&self, stream: &mut TcpStream, from: usize) -> Result<Vec<u8>, RuntimeError> {
        match read_frame(stream) {
            Ok((DATA, bytes)) => Ok(bytes),
            Ok((_, message)) => {
                let why = String::from_utf8_lossy(&message).into_owned();
                self.stop(why.clone());
                Err(RuntimeError::Device(format!(
                    "{why}; every rank was stopped"
                )))
            }
            Err(e) => Err(self.lost(from, e)),
        }
    }

    /// The error of a connection to rank `r` that broke or timed out.
    fn lost(&self, r: usize, e: std::io::Error) -> RuntimeError {
        let why = match e.kind() {
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
                format!("rank {r} did not answer within POPCORN_RANK_TIMEOUT (it may be stuck)")
            }
            _ => format!("rank {r} closed its connection ({e}): it failed or exited"),
        };
        self.stop(why.clone());
        RuntimeError::Device(format!("{why}; every rank was stopped"))
    }
}

impl Drop for HostChannel {
    fn drop(&mut self) {
        if let Some(path) = &self.written {
            let _ = std::fs::remove_file(path);
        }
    }
}

fn greeting(bytes: &[u8]) -> Option<(usize, usize)> {
    let rank = u64::from_le_bytes(bytes.get(0..8)?.try_into().ok()?) as usize;
    let size = u64::from_le_bytes(bytes.get(8..16)?.try_into().ok()?) as usize;
    Some((rank, size))
}

/// Rank 0's address from the rendezvous (the file's contents, once rank 0 wrote it).
fn address(rendezvous: &Rendezvous) -> Result<String, String> {
    match rendezvous {
        Rendezvous::Address(a) => Ok(a.clone()),
        Rendezvous::File(path) => {
            let text = std::fs::read_to_string(path).map_err(|e| e.to_string())?;
            let addr = text.trim().to_string();
            addr.to_socket_addrs().map_err(|e| e.to_string())?;
            Ok(addr)
        }
    }
}

/// Writes `text` to `path` through a temporary file renamed over it, so that a reader sees
/// the whole address or nothing.
fn write_atomically(path: &Path, text: &str) -> Result<(), RuntimeError> {
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    std::fs::write(&tmp, text)
        .and_then(|_| std::fs::rename(&tmp, path))
        .map_err(|e| {
            io_error(
                &format!("writing the rendezvous file {}", path.display()),
                e,
            )
        })
}

fn io_error(what: &str, e: std::io::Error) -> RuntimeError {
    RuntimeError::Device(format!("{what}: {e}"))
}

fn poisoned() -> RuntimeError {
    RuntimeError::Device("the host channel between the ranks is unusable".into())
}

fn malformed(r: usize) -> RuntimeError {
    RuntimeError::Device(format!("a malformed message came from rank {r}"))
}

/// A host vector as bytes: its element type's tag, then its elements (little-endian).
fn encode(v: &HostVec) -> Vec<u8> {
    let mut out = Vec::new();
    match v {
        HostVec::F32(x) => {
            out.push(0);
            x.iter()
                .for_each(|e| out.extend_from_slice(&e.to_le_bytes()));
        }
        HostVec::F64(x) => {
            out.push(1);
            x.iter()
                .for_each(|e| out.extend_from_slice(&e.to_le_bytes()));
        }
        HostVec::U32(x) => {
            out.push(2);
            x.iter()
                .for_each(|e| out.extend_from_slice(&e.to_le_bytes()));
        }
        HostVec::I32(x) => {
            out.push(3);
            x.iter()
                .for_each(|e| out.extend_from_slice(&e.to_le_bytes()));
        }
        HostVec::Half(h, x) => {
            out.push(match h {
                kernel_ir::Half::Bf16 => 4,
                kernel_ir::Half::F16 => 5,
            });
            x.iter()
                .for_each(|e| out.extend_from_slice(&e.to_le_bytes()));
        }
    }
    out
}

fn decode(bytes: &[u8]) -> Option<HostVec> {
    let (&tag, body) = bytes.split_first()?;
    fn words<const N: usize, T>(body: &[u8], f: impl Fn([u8; N]) -> T) -> Option<Vec<T>> {
        body.len().is_multiple_of(N).then(|| {
            body.chunks_exact(N)
                .map(|c| f(c.try_into().unwrap_or([0; N])))
                .collect()
        })
    }
    Some(match tag {
        0 => HostVec::F32(words(body, f32::from_le_bytes)?),
        1 => HostVec::F64(words(body, f64::from_le_bytes)?),
        2 => HostVec::U32(words(body, u32::from_le_bytes)?),
        3 => HostVec::I32(words(body, i32::from_le_bytes)?),
        4 => HostVec::Half(kernel_ir::Half::Bf16, words(body, u16::from_le_bytes)?),
        5 => HostVec::Half(kernel_ir::Half::F16, words(body, u16::from_le_bytes)?),
        _ => return None,
    })
}

/// The ranks' parts gathered on the host, in rank order, on every rank.
pub(crate) fn gather_host(
    channel: &HostChannel,
    mine: &HostVec,
) -> Result<Vec<HostVec>, RuntimeError> {
    channel
        .all_gather(&encode(mine))?
        .iter()
        .enumerate()
        .map(|(r, b)| decode(b).ok_or_else(|| malformed(r)))
        .collect()
}

/// Collectives between processes of one rank each, through the host channel (the CPU ranks
/// of a run over several processes): each rank's part goes to rank 0 and the whole, or the
/// sum in rank order, comes back, so the results equal one process's in-memory ranks'.
pub struct WorldCollectives {
    channel: Arc<HostChannel>,
}

impl WorldCollectives {
    /// Collectives over `channel`.
    pub fn new(channel: Arc<HostChannel>) -> Self {
        WorldCollectives { channel }
    }

    fn only_mine(&self, ranks: &[usize]) -> Result<(), RuntimeError> {
        if ranks == [self.channel.rank] {
            Ok(())
        } else {
            Err(RuntimeError::Internal(format!(
                "the world's collectives run one rank per process; rank {} was given {ranks:?}",
                self.channel.rank
            )))
        }
    }

    /// Reads this process's part (a buffer and how many of its first elements it is) back to
    /// the host, gathers every rank's over the channel, combines them in rank order and writes
    /// the result to `dest`.
    fn through_channel<B: Backend>(
        &self,
        backend: &B,
        (buf, len): (&B::Buf, usize),
        dest: &B::Buf,
        combine: Combine,
    ) -> Result<(), RuntimeError> {
        let mine = prefix(backend.download(buf)?, len)?;
        match combine(gather_host(&self.channel, &mine)?)? {
            Some(all) => write_prefix(backend, dest, &all),
            None => Ok(()),
        }
    }
}

impl<B: Backend> Collectives<B> for WorldCollectives {
    fn describe(&self) -> String {
        format!(
            "host channel, rank {} of {} processes",
            self.channel.rank, self.channel.size
        )
    }

    fn all_gather(&self, g: &Gather<'_, B>) -> Result<(), RuntimeError> {
        self.only_mine(g.ranks)?;
        self.through_channel(g.backends[0], g.parts[0], g.wholes[0], concatenated)
    }

    fn all_reduce_sum(
        &self,
        ranks: &[usize],
        backends: &[&B],
        bufs: &[&B::Buf],
        len: usize,
    ) -> Result<(), RuntimeError> {
        self.only_mine(ranks)?;
        self.through_channel(backends[0], (bufs[0], len), bufs[0], summed)
    }

    fn abandon(&self, error: &RuntimeError) {
        self.channel.abandon(&error.to_string());
    }
}

#[cfg(test)]
mod tests;
