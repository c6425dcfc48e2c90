//! `verbs`: the fabric on real RDMA NICs (ConnectX, BlueField, Soft-RoCE) through
//! libibverbs, wrapped by `sideway`. Built only with the cargo feature `verbs`.
//!
//! Buffers posted to the NIC belong to per-queue-pair in-flight tables until their
//! completion. Completions do not say which queue pair they belong to (sideway exposes
//! no `qp_num`), so the 64-bit wr_id given to the NIC carries, in its top 16 bits, the
//! table number and whether it is a receive; the low 48 bits are the in-flight token.
//! Connection set-up exchanges [`Endpoint`]s (GID, QPN, PSN, LID) over any side channel.
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use prescient_bindings::sideway::ibverbs::address::{AddressHandleAttribute, Gid, GidType};
use prescient_bindings::sideway::ibverbs::completion::{GenericCompletionQueue, PollCompletionQueueError};
use prescient_bindings::sideway::ibverbs::device::{DeviceInfo, DeviceList};
use prescient_bindings::sideway::ibverbs::device_context::{DeviceContext, Mtu, PortState};
use prescient_bindings::sideway::ibverbs::protection_domain::ProtectionDomain;
use prescient_bindings::sideway::ibverbs::queue_pair::{
    GenericQueuePair, PostSendGuard, QueuePair as _, QueuePairAttribute, QueuePairState, SendOperationFlags,
    SetInlineData, SetScatterGatherEntry, WorkRequestFlags,
};
use prescient_bindings::sideway::ibverbs::AccessFlags;

use super::{
    Access, Completion, CompletionQueue, Endpoint, Fabric, FabricError, InFlight, InFlightEntry, LocalBuf, Memory,
    MemoryRegion, Op, PostError, QpOptions, QpState, QueuePair, RawQp, Reset, Result, WcOpcode, WcStatus, WorkRequest,
};
use crate::limits::{CQ_DEPTH_MAX, QPS_PER_CQ_MAX, WAIT_SPINS};

const TOKEN_MASK: u64 = (1 << 48) - 1;
/// Bytes of a WRITE or SEND carried inline in the work request (the NIC copies them at
/// post time, so it needs no DMA read of the buffer): a log entry's header with its
/// fragment header, an outcome notice, a small fragment. A device that refuses inline
/// data gets queue pairs without it.
pub const INLINE_BYTES: u32 = 256;
const RECV_TAG: u64 = 1;

fn verbs_err(call: &'static str) -> impl Fn(String) -> FabricError {
    move |why| FabricError::Verbs { call, why }
}

/// An RDMA device context and protection domain.
pub struct VerbsNode {
    pd: Arc<ProtectionDomain>,
    ctx: Arc<DeviceContext>,
    gid: Gid,
    gid_index: u8,
    lid: u16,
    port: u8,
    name: String,
}

impl std::fmt::Debug for VerbsNode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerbsNode").field("device", &self.name).field("gid_index", &self.gid_index).finish()
    }
}

impl VerbsNode {
    /// Opens device `name` (or the first device) on port 1, choosing a RoCEv2 GID with an
    /// IPv4 address where there is one.
    pub fn open(name: Option<&str>) -> Result<Self> {
        Self::open_port(name, 1, None)
    }

    /// Opens device `name` (or the first device) on `port` with GID table entry
    /// `gid_index` (`None`: the first RoCEv2 GID with an IPv4 address, else the first
    /// non-zero one). Every refusal names the device and says what to do: a device not
    /// found lists those `ibv_get_device_list` found, a port or GID index not there says
    /// which there are.
    pub fn open_port(name: Option<&str>, port: u8, gid_index: Option<u8>) -> Result<Self> {
        let list = DeviceList::new().map_err(|e| {
            let os = std::error::Error::source(&e).map(|s| s.to_string()).unwrap_or_default();
            FabricError::Device(format!(
                "ibv_get_device_list failed ({e}: {os}); ENOSYS (os error 38) means this kernel has no RDMA \
                 (InfiniBand) subsystem: use the emu backend here, or run on an RDMA host or in the Soft-RoCE VM \
                 (ci/softroce.sh)"
            ))
        })?;
        let device = list.iter().find(|d| name.is_none_or(|n| d.name() == n)).ok_or_else(|| {
            let found: Vec<String> = list.iter().map(|d| d.name()).collect();
            let found = if found.is_empty() { "none".to_owned() } else { found.join(", ") };
            FabricError::Device(format!(
                "no RDMA device {} (ibv_get_device_list found: {found}); name one of those, or create one \
                 (`rdma link add rxe0 type rxe netdev IF` for Soft-RoCE), or use the emu fabric",
                name.unwrap_or("(any)"),
            ))
        })?;
        let device_name = device.name();
        let ctx = device.open().map_err(|e| FabricError::Device(format!("opening {device_name} failed: {e}")))?;
        let ports = ctx.query_device().map_err(|e| verbs_err("ibv_query_device_ex")(e.to_string()))?.phys_port_cnt();
        if port == 0 || port > ports {
            return Err(FabricError::Device(format!(
                "{device_name} has no port {port}: its ports are 1 to {ports} (ibv_devinfo {device_name}); fix the \
                 node's device_port"
            )));
        }
        let attr = ctx.query_port(port).map_err(|e| verbs_err("ibv_query_port")(e.to_string()))?;
        if attr.port_state() != PortState::Active {
            return Err(FabricError::Device(format!(
                "{device_name} port {port} is {:?}, not active: bring its link up (ibv_devinfo {device_name} shows \
                 the state; for Soft-RoCE, `ip link set IF up` on its netdev)",
                attr.port_state()
            )));
        }
        let gids: Vec<_> = ctx
            .query_gid_table()
            .map_err(|e| verbs_err("ibv_query_gid_table")(e.to_string()))?
            .into_iter()
            .filter(|g| g.port_num() == u32::from(port))
            .collect();
        let pick = match gid_index {
            Some(i) => gids.iter().find(|g| g.gid_index() == u32::from(i) && !g.gid().is_zero()).ok_or_else(|| {
                let valid: Vec<String> = gids.iter().filter(|g| !g.gid().is_zero()).map(|g| g.gid_index().to_string()).collect();
                FabricError::Device(format!(
                    "{device_name} port {port} has no GID at index {i} (entries with a GID: {}); pick one of those \
                     for the node's gid_index (show_gids lists them), or leave gid_index out to choose a RoCEv2 IPv4 one",
                    if valid.is_empty() { "none".to_owned() } else { valid.join(", ") }
                ))
            })?,
            None => gids
                .iter()
                .find(|g| {
                    g.gid_type() == GidType::RoceV2 && std::net::Ipv6Addr::from(g.gid()).to_ipv4_mapped().is_some()
                })
                .or_else(|| gids.iter().find(|g| !g.gid().is_zero()))
                .ok_or_else(|| {
                    FabricError::Device(format!("{device_name} port {port} has no usable GID; give its netdev an address"))
                })?,
        };
        let pd = ctx.alloc_pd().map_err(|e| verbs_err("ibv_alloc_pd")(e.to_string()))?;
        Ok(Self {
            gid: pick.gid(),
            gid_index: pick.gid_index() as u8,
            lid: attr.lid(),
            port,
            pd,
            ctx,
            name: device_name,
        })
    }

    /// The device's name.
    pub fn device_name(&self) -> &str {
        &self.name
    }

    /// The GID table entry its queue pairs use.
    pub fn gid_index(&self) -> u8 {
        self.gid_index
    }
}

fn access_flags(a: Access) -> AccessFlags {
    let mut f = AccessFlags::none();
    for (ours, theirs) in [
        (Access::LOCAL_WRITE, AccessFlags::LocalWrite),
        (Access::REMOTE_WRITE, AccessFlags::RemoteWrite),
        (Access::REMOTE_READ, AccessFlags::RemoteRead),
        (Access::REMOTE_ATOMIC, AccessFlags::RemoteAtomic),
    ] {
        if a.contains(ours) {
            f |= theirs;
        }
    }
    f
}

/// The IB encoding of a transport timeout: 4.096 us * 2^t.
fn timeout_code(us: u32) -> u8 {
    (1..=31).find(|t| 4.096 * f64::from(1u32 << t) >= f64::from(us)).unwrap_or(31)
}

/// The IB encoding of an RNR back-off (table 45 of the IB spec, microseconds).
fn rnr_code(us: u32) -> u8 {
    const TABLE: [u32; 31] = [
        10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1280, 1920, 2560, 3840, 5120, 7680, 10240, 15360,
        20480, 30720, 40960, 61440, 81920, 122880, 163840, 245760, 327680, 491520,
    ];
    TABLE.iter().position(|&t| t >= us).map_or(0, |i| i as u8 + 1)
}

/// A queue pair's in-flight tables, shared with its completion queues.
struct Tables {
    qpn: u32,
    send: Mutex<InFlight>,
    recv: Mutex<InFlight>,
    failed: AtomicBool,
}

struct CqInner {
    cq: GenericCompletionQueue,
    tables: Mutex<Vec<Option<Arc<Tables>>>>,
}

/// A verbs completion queue.
#[derive(Clone)]
pub struct VerbsCq {
    inner: Arc<CqInner>,
}

impl std::fmt::Debug for VerbsCq {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("VerbsCq")
    }
}

impl VerbsCq {
    fn attach(&self, t: &Arc<Tables>) -> Result<u64> {
        let mut tables = self.inner.tables.lock().expect("cq tables lock");
        let slot = match tables.iter().position(Option::is_none) {
            Some(i) => i,
            None if tables.len() < QPS_PER_CQ_MAX => {
                tables.push(None);
                tables.len() - 1
            }
            None => return Err(FabricError::Limit { what: "queue pairs per completion queue", limit: QPS_PER_CQ_MAX }),
        };
        tables[slot] = Some(Arc::clone(t));
        Ok(slot as u64)
    }

    /// The completion of the request whose NIC wr_id is `wr_id`, its buffer taken back
    /// from its queue pair's in-flight table; `None` for a queue pair since destroyed or
    /// a request its table no longer holds (drained at a reset).
    fn complete(
        &self,
        wr_id: u64,
        raw_status: u32,
        raw_opcode: u32,
        byte_len: u32,
        imm_data: u32,
    ) -> Option<Completion> {
        let tag = wr_id >> 48;
        let token = wr_id & TOKEN_MASK;
        let is_recv = tag & 1 == RECV_TAG;
        let t = self.inner.tables.lock().expect("cq tables lock").get((tag >> 1) as usize).cloned().flatten()?;
        let entry = if is_recv { t.recv.lock() } else { t.send.lock() }.expect("in-flight lock").remove(token)?;
        let status = status_of(raw_status);
        if status != WcStatus::Success {
            t.failed.store(true, Ordering::Release);
        }
        let opcode = match (is_recv, raw_opcode) {
            (true, 129) => WcOpcode::RecvWithImm,
            (true, _) => WcOpcode::Recv,
            (false, _) => entry.opcode,
        };
        let ok = status == WcStatus::Success;
        Some(Completion {
            wr_id: entry.wr_id,
            status,
            opcode,
            byte_len: if ok { byte_len } else { 0 },
            imm: (ok && opcode == WcOpcode::RecvWithImm).then_some(imm_data),
            qp_num: t.qpn,
            buf: Some(entry.buf),
            path: crate::fabric::PathSignal::default(),
        })
    }

    fn detach(&self, slot: u64) {
        if let Some(s) = self.inner.tables.lock().expect("cq tables lock").get_mut(slot as usize) {
            *s = None;
        }
    }
}

fn status_of(raw: u32) -> WcStatus {
    match raw {
        0 => WcStatus::Success,
        1 => WcStatus::LocalLength,
        4 => WcStatus::LocalProtection,
        5 => WcStatus::Flushed,
        9 => WcStatus::RemoteInvalidRequest,
        10 => WcStatus::RemoteAccess,
        11 => WcStatus::RemoteOperation,
        12 => WcStatus::RetryExceeded,
        13 => WcStatus::RnrRetryExceeded,
        other => WcStatus::Other(other),
    }
}

impl CompletionQueue for VerbsCq {
    fn poll(&self, out: &mut Vec<Completion>, max: usize) -> Result<usize> {
        // One completion per ibv_start_poll / ibv_end_poll, never ibv_next_poll: rxe's
        // next_poll, on finding the queue empty, already stores the consumer index and
        // unlocks the CQ, and the end_poll that sideway's poller always runs on drop then
        // advances past (loses) the next completion to arrive and unlocks again. Every
        // provider handles start + end without next; a clustered node lost heartbeat
        // READ completions within milliseconds before this (the conformance suite,
        // polling one completion at a time, never called next_poll).
        let mut n = 0;
        while n < max {
            let mut poller = match self.inner.cq.start_poll() {
                Ok(p) => p,
                Err(PollCompletionQueueError::CompletionQueueEmpty) => break,
                Err(e) => return Err(verbs_err("ibv_start_poll")(e.to_string())),
            };
            let Some(wc) = poller.next() else { break };
            let (wr_id, raw_status, raw_opcode, byte_len) = (wc.wr_id(), wc.status(), wc.opcode(), wc.byte_len());
            let imm_data = if raw_status == 0 && raw_opcode == 129 { wc.imm_data() } else { 0 };
            drop(poller);
            if let Some(c) = self.complete(wr_id, raw_status, raw_opcode, byte_len, imm_data) {
                out.push(c);
                n += 1;
            }
        }
        Ok(n)
    }

    fn wait(&self, out: &mut Vec<Completion>, max: usize, timeout: Duration) -> Result<usize> {
        for _ in 0..WAIT_SPINS {
            let n = self.poll(out, max)?;
            if n > 0 {
                return Ok(n);
            }
            std::hint::spin_loop();
        }
        let deadline = Instant::now() + timeout;
        loop {
            let n = self.poll(out, max)?;
            if n > 0 || Instant::now() >= deadline {
                return Ok(n);
            }
            std::thread::sleep(Duration::from_micros(50));
        }
    }
}

/// A verbs RC queue pair.
pub struct VerbsQp {
    qp: Mutex<GenericQueuePair>,
    tables: Arc<Tables>,
    send_cq: VerbsCq,
    recv_cq: VerbsCq,
    send_tag: u64,
    recv_tag: u64,
    options: QpOptions,
    gid: Gid,
    gid_index: u8,
    lid: u16,
    port: u8,
    /// Largest WRITE or SEND posted inline (0: none).
    inline_max: u32,
    /// The first packet sequence number of this connection; a reset picks another
    /// (see [`next_psn`]).
    psn: u32,
}

impl std::fmt::Debug for VerbsQp {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VerbsQp").field("qpn", &self.tables.qpn).finish()
    }
}

impl Drop for VerbsQp {
    fn drop(&mut self) {
        self.send_cq.detach(self.send_tag >> 1);
        self.recv_cq.detach(self.recv_tag >> 1);
    }
}

impl Fabric for VerbsNode {
    type Cq = VerbsCq;
    type Qp = VerbsQp;

    fn name(&self) -> &'static str {
        "verbs"
    }

    fn register(&self, memory: Arc<Memory>, access: Access) -> Result<Arc<MemoryRegion>> {
        access.validate()?;
        // SAFETY: `memory` is a live mapping of `len` bytes; the returned MemoryRegion keeps
        // the Arc<Memory> and drops the registration (ibv_dereg_mr) before it, so the NIC
        // never touches unmapped memory. Memory is only reached as DMA memory (see memory.rs).
        let mr = unsafe { self.pd.reg_mr(memory.as_ptr() as usize, memory.len(), access_flags(access)) }
            .map_err(|e| verbs_err("ibv_reg_mr")(format!("{e} ({} bytes)", memory.len())))?;
        let (lkey, rkey) = (mr.lkey(), mr.rkey());
        let domain = Arc::as_ptr(&self.pd) as u64;
        Ok(Arc::new(MemoryRegion::new(memory, access, (lkey, rkey), domain, Box::new(mr))))
    }

    fn create_cq(&self, depth: usize) -> Result<VerbsCq> {
        if depth == 0 || depth > CQ_DEPTH_MAX {
            return Err(FabricError::Limit { what: "completion queue depth", limit: CQ_DEPTH_MAX });
        }
        let mut b = self.ctx.create_cq_builder();
        b.setup_cqe(depth as u32);
        let cq = b.build_ex().map_err(|e| verbs_err("ibv_create_cq_ex")(e.to_string()))?;
        Ok(VerbsCq {
            inner: Arc::new(CqInner { cq: GenericCompletionQueue::from(cq), tables: Mutex::new(Vec::new()) }),
        })
    }

    fn create_qp(&self, send_cq: &VerbsCq, recv_cq: &VerbsCq, options: QpOptions) -> Result<QueuePair<VerbsQp, Reset>> {
        options.validate()?;
        let mut b = self.pd.create_qp_builder();
        b.setup_max_send_wr(options.send_depth as u32)
            .setup_max_recv_wr(options.recv_depth as u32)
            .setup_max_send_sge(1)
            .setup_max_recv_sge(1)
            .setup_max_inline_data(INLINE_BYTES)
            .setup_send_cq(send_cq.inner.cq.clone())
            .setup_recv_cq(recv_cq.inner.cq.clone())
            .setup_send_ops_flags(
                SendOperationFlags::Write
                    | SendOperationFlags::WriteWithImmediate
                    | SendOperationFlags::Read
                    | SendOperationFlags::Send
                    | SendOperationFlags::AtomicCompareAndSwap
                    | SendOperationFlags::AtomicFetchAndAdd,
            );
        let (qp, inline_max) = match b.build_ex() {
            Ok(qp) => (qp, INLINE_BYTES),
            Err(e) => {
                tracing::debug!(device = %self.name, error = %e, "no queue pair with inline data; trying without");
                b.setup_max_inline_data(0);
                (b.build_ex().map_err(|e| verbs_err("ibv_create_qp_ex")(e.to_string()))?, 0)
            }
        };
        let qp: GenericQueuePair = qp.into();
        let qpn = qp.qp_number();
        let tables = Arc::new(Tables {
            qpn,
            send: Mutex::new(InFlight::new(options.send_depth)),
            recv: Mutex::new(InFlight::new(options.recv_depth)),
            failed: AtomicBool::new(false),
        });
        let send_tag = send_cq.attach(&tables)? << 1;
        let recv_tag = (recv_cq.attach(&tables)? << 1) | RECV_TAG;
        Ok(QueuePair::from_raw(VerbsQp {
            qp: Mutex::new(qp),
            tables,
            send_cq: send_cq.clone(),
            recv_cq: recv_cq.clone(),
            send_tag,
            recv_tag,
            options,
            gid: self.gid,
            gid_index: self.gid_index,
            lid: self.lid,
            port: self.port,
            inline_max,
            psn: next_psn(qpn, qpn.wrapping_mul(0x9E37_79B9)),
        }))
    }
}

/// The starting PSN after `previous` for queue pair `qpn`: about half the 24-bit
/// sequence space on, so that it is far from the old connection's recent PSNs, plus an
/// odd step of the QPN's, so that a queue pair goes through every PSN before one repeats
/// and queue pairs differ.
fn next_psn(qpn: u32, previous: u32) -> u32 {
    let step = 0x0080_0000 + ((qpn.wrapping_mul(0x85EB_CA6B) & 0xFFFF) | 1);
    previous.wrapping_add(step) & 0x00FF_FFFF
}

const ALL_REMOTE: AccessFlags =
    AccessFlags::LocalWrite.or(AccessFlags::RemoteWrite).or(AccessFlags::RemoteRead).or(AccessFlags::RemoteAtomic);

impl VerbsQp {
    fn modify(&self, attr: &QueuePairAttribute, call: &'static str) -> Result<()> {
        self.qp.lock().expect("qp lock").modify(attr).map_err(|e| verbs_err(call)(e.to_string()))
    }
}

impl RawQp for VerbsQp {
    fn qpn(&self) -> u32 {
        self.tables.qpn
    }

    fn endpoint(&self) -> Endpoint {
        Endpoint { gid: self.gid.raw, qpn: self.tables.qpn, psn: self.psn, lid: self.lid, port: 0 }
    }

    fn state(&self) -> QpState {
        // The NIC moves a queue pair to ERR without telling the cached state; an error
        // completion is how we learn it.
        let cached = self.qp.lock().expect("qp lock").state();
        if self.tables.failed.load(Ordering::Acquire) && cached == QueuePairState::ReadyToSend {
            return QpState::Error;
        }
        match cached {
            QueuePairState::Reset => QpState::Reset,
            QueuePairState::Init => QpState::Init,
            QueuePairState::ReadyToReceive => QpState::Rtr,
            QueuePairState::ReadyToSend => QpState::Rts,
            _ => QpState::Error,
        }
    }

    fn modify_to_init(&mut self) -> Result<()> {
        let mut attr = QueuePairAttribute::new();
        attr.setup_state(QueuePairState::Init).setup_pkey_index(0).setup_port(self.port).setup_access_flags(ALL_REMOTE);
        self.modify(&attr, "ibv_modify_qp(INIT)")
    }

    fn modify_to_rtr(&mut self, remote: &Endpoint) -> Result<()> {
        let mut attr = QueuePairAttribute::new();
        attr.setup_state(QueuePairState::ReadyToReceive)
            .setup_path_mtu(Mtu::Mtu1024)
            .setup_dest_qp_num(remote.qpn)
            .setup_rq_psn(remote.psn)
            .setup_max_dest_read_atomic(16)
            .setup_min_rnr_timer(rnr_code(self.options.rnr_timer_us));
        let mut ah = AddressHandleAttribute::new();
        ah.setup_dest_lid(remote.lid)
            .setup_port(self.port)
            .setup_service_level(0)
            .setup_grh_src_gid_index(self.gid_index)
            .setup_grh_dest_gid(&Gid { raw: remote.gid })
            .setup_grh_hop_limit(64);
        attr.setup_address_vector(&ah);
        self.modify(&attr, "ibv_modify_qp(RTR)")
    }

    fn modify_to_rts(&mut self) -> Result<()> {
        let o = self.options;
        let mut attr = QueuePairAttribute::new();
        attr.setup_state(QueuePairState::ReadyToSend)
            .setup_sq_psn(self.psn)
            .setup_timeout(timeout_code(o.timeout_us))
            .setup_retry_cnt(o.retry_count)
            .setup_rnr_retry(o.rnr_retry_count)
            .setup_max_read_atomic(16);
        self.modify(&attr, "ibv_modify_qp(RTS)")
    }

    fn modify_to_reset(&mut self, out: &mut Vec<LocalBuf>) -> Result<()> {
        let mut attr = QueuePairAttribute::new();
        attr.setup_state(QueuePairState::Reset);
        self.modify(&attr, "ibv_modify_qp(RESET)")?;
        // After RESET the NIC forgets every request without completing it: the buffers
        // come back from the tables.
        let mut entries = Vec::new();
        self.tables.send.lock().expect("in-flight lock").drain(&mut entries);
        self.tables.recv.lock().expect("in-flight lock").drain(&mut entries);
        out.extend(entries.into_iter().map(|e| e.buf));
        self.tables.failed.store(false, Ordering::Release);
        // A new connection starts a new sequence. With the same PSN (and QPN) the
        // endpoint would be the one the peer already knows: a peer whose queue pair
        // never failed would take our new offer for a retransmission of the old one
        // and keep its queue pair, which expects the old connection's next PSN, and
        // drops or NAKs every packet of the new one (seen on two Soft-RoCE VMs: a
        // link that never came back, with no error on the peer's side).
        self.psn = next_psn(self.tables.qpn, self.psn);
        Ok(())
    }

    fn post_send(&self, request: WorkRequest) -> Result<(), PostError> {
        let len = request.buf.len();
        if matches!(request.op, Op::CompareSwap { .. } | Op::FetchAdd { .. }) && len != 8 {
            return Err(PostError {
                error: FabricError::InvalidRequest("an atomic's local buffer must be exactly 8 bytes"),
                request,
            });
        }
        let (lkey, addr) = (request.buf.region().lkey(), request.buf.addr());
        // A small WRITE or SEND goes inline: its bytes copied into the request here.
        let mut inline = [0u8; INLINE_BYTES as usize];
        let inline_len = match request.op {
            Op::Write { .. } | Op::Send if len > 0 && len <= self.inline_max as usize => {
                request.buf.read(&mut inline[..len]).map(|()| len).unwrap_or(0)
            }
            _ => 0,
        };
        let inline = &inline[..inline_len];
        let mut qp = self.qp.lock().expect("qp lock");
        let WorkRequest { wr_id, op, buf } = request;
        let token = match self.tables.send.lock().expect("in-flight lock").insert(InFlightEntry {
            wr_id,
            opcode: op.opcode(),
            buf,
        }) {
            Ok(t) => t,
            Err(e) => {
                let depth = self.options.send_depth;
                return Err(PostError {
                    error: FabricError::QueueFull { queue: "send", qpn: self.tables.qpn, depth },
                    request: WorkRequest { wr_id, op, buf: e.buf },
                });
            }
        };
        let mut guard = qp.start_post_send();
        // rxe takes an inline request's bytes only with IBV_SEND_INLINE in its flags
        // (without it, a local QP operation error); every provider accepts the flag.
        let flags = if inline.is_empty() {
            WorkRequestFlags::Signaled
        } else {
            WorkRequestFlags::Signaled | WorkRequestFlags::Inline
        };
        let wr = guard.construct_wr((self.send_tag << 48) | token, flags);
        // SAFETY: the buffer lies inside a region registered on this PD (lkey), and the
        // in-flight table owns it (and through it the region and mapping) until the
        // completion for this token is polled, so the NIC never sees freed memory.
        // (An inline request's bytes are copied by setup_inline_data; the table still
        // holds its buffer until the completion, as for every other request.)
        unsafe {
            match op {
                Op::Write { remote, imm: None } if !inline.is_empty() => {
                    wr.setup_write(remote.rkey, remote.addr).setup_inline_data(inline)
                }
                Op::Write { remote, imm: Some(imm) } if !inline.is_empty() => {
                    wr.setup_write_imm(remote.rkey, remote.addr, imm).setup_inline_data(inline)
                }
                Op::Send if !inline.is_empty() => wr.setup_send().setup_inline_data(inline),
                Op::Write { remote, imm: None } => {
                    wr.setup_write(remote.rkey, remote.addr).setup_sge(lkey, addr, len as u32)
                }
                Op::Write { remote, imm: Some(imm) } => {
                    wr.setup_write_imm(remote.rkey, remote.addr, imm).setup_sge(lkey, addr, len as u32)
                }
                Op::Read { remote } => wr.setup_read(remote.rkey, remote.addr).setup_sge(lkey, addr, len as u32),
                Op::CompareSwap { remote, compare, swap } => {
                    wr.setup_atomic_compare_swap(remote.rkey, remote.addr, compare, swap).setup_sge(lkey, addr, 8)
                }
                Op::FetchAdd { remote, add } => {
                    wr.setup_atomic_fetch_add(remote.rkey, remote.addr, add).setup_sge(lkey, addr, 8)
                }
                Op::Send => wr.setup_send().setup_sge(lkey, addr, len as u32),
            }
        }
        if let Err(e) = guard.post() {
            let entry = self.tables.send.lock().expect("in-flight lock").remove(token).expect("just inserted");
            return Err(PostError {
                error: verbs_err("ibv_post_send")(e.to_string()),
                request: WorkRequest { wr_id, op, buf: entry.buf },
            });
        }
        Ok(())
    }

    fn post_recv(&self, wr_id: u64, buf: LocalBuf) -> Result<(), PostError<LocalBuf>> {
        let (lkey, addr, len) = (buf.region().lkey(), buf.addr(), buf.len() as u32);
        let qp = self.qp.lock().expect("qp lock");
        let token = match self.tables.recv.lock().expect("in-flight lock").insert(InFlightEntry {
            wr_id,
            opcode: WcOpcode::Recv,
            buf,
        }) {
            Ok(t) => t,
            Err(e) => {
                let depth = self.options.recv_depth;
                return Err(PostError {
                    error: FabricError::QueueFull { queue: "receive", qpn: self.tables.qpn, depth },
                    request: e.buf,
                });
            }
        };
        // SAFETY: as for sends: the buffer lies in a region registered with LOCAL_WRITE
        // on this PD (lkey; emu and verbs refuse a receive buffer without it), and the
        // in-flight table owns it (and through it the region and mapping) until the
        // completion for this token is polled or a reset drains the table.
        let posted =
            unsafe { prescient_bindings::verbs::post_recv(&qp, (self.recv_tag << 48) | token, lkey, addr, len) };
        if let Err(e) = posted {
            let entry = self.tables.recv.lock().expect("in-flight lock").remove(token).expect("just inserted");
            return Err(PostError { error: verbs_err("ibv_post_recv")(e.to_string()), request: entry.buf });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodings() {
        assert_eq!(timeout_code(8_000), 11);
        assert_eq!(timeout_code(1), 1);
        assert_eq!(rnr_code(1_000), 14);
        assert_eq!(rnr_code(10), 1);
        assert_eq!(rnr_code(10_000_000), 0);
    }
}
