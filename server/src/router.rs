//! Routing work to the core that owns it. Each core owns the queues whose
//! `xxh3(account/queue) % shards` is its index, and core 0 owns the service
//! properties. Work for another core crosses glommio's channel mesh as a
//! [`Job`]: a closure over plain owned data (`Send`) that runs there against
//! that core's shard and sends its typed result back on a oneshot channel.
//! The `Shard` itself never leaves its core.

use engine::disk::dma::DmaDisk;
use engine::disk::Disk;
use engine::{QueueError, Shard};
use futures::channel::oneshot;
use futures::future::LocalBoxFuture;
use glommio::channels::channel_mesh::{Full, MeshBuilder, Receivers, Senders};
use std::future::Future;
use std::rc::Rc;

/// Work sent to another core: given that core's shard and service store, a
/// future that does the work and delivers its own result.
pub type Job<D> = Box<dyn FnOnce(Rc<Shard<D>>, Rc<ServiceStore>) -> LocalBoxFuture<'static, ()> + Send>;

/// Which core owns `account/queue`.
pub fn owner(account: &str, queue: &str, shards: usize) -> usize {
    // The hash of `account/queue` decides where a queue lives on disk, so
    // its input never changes; it is joined on the stack (names are short:
    // 24 and 63 characters at most), not on the heap per request.
    let len = account.len() + 1 + queue.len();
    let mut stack = [0u8; 128];
    let mut heap = Vec::new();
    let key: &mut [u8] = match stack.get_mut(..len) {
        Some(k) => k,
        None => {
            heap.resize(len, 0);
            &mut heap
        }
    };
    let (a, rest) = key.split_at_mut(account.len());
    a.copy_from_slice(account.as_bytes());
    if let Some((slash, q)) = rest.split_first_mut() {
        *slash = b'/';
        q.copy_from_slice(queue.as_bytes());
    }
    (xxhash_rust::xxh3::xxh3_64(key) % shards.max(1) as u64) as usize
}

pub use crate::service::ServiceStore;

/// A core's view of all shards: its own, and senders to the others. One
/// per core, owned by that core.
pub struct Router<D: Disk = DmaDisk> {
    pub me: usize,
    pub shards: usize,
    pub shard: Rc<Shard<D>>,
    pub service: Rc<ServiceStore>,
    senders: Option<Senders<Job<D>>>,
}

pub type Mesh<D = DmaDisk> = MeshBuilder<Job<D>, Full>;

pub fn mesh<D: Disk>(shards: usize) -> Mesh<D> {
    MeshBuilder::full(shards, crate::limits::MESH_CHANNEL_CAPACITY)
}

impl<D: Disk> Router<D> {
    /// Joins the mesh (when there is more than one shard) and starts serving
    /// commands that other cores send here.
    pub async fn join(
        mesh: Option<Mesh<D>>,
        shard: Rc<Shard<D>>,
        service: Rc<ServiceStore>,
        me: usize,
        shards: usize,
    ) -> Router<D> {
        let senders = match mesh {
            None => None,
            Some(m) => {
                let (senders, receivers) = m.join().await.expect("joining the channel mesh");
                assert_eq!(senders.peer_id(), me, "mesh peer id must equal the shard index");
                serve_remote(receivers, shard.clone(), service.clone());
                Some(senders)
            }
        };
        Router {
            me,
            shards,
            shard,
            service,
            senders,
        }
    }

    /// The core that owns `account/queue`.
    pub fn owner_of(&self, account: &str, queue: &str) -> usize {
        owner(account, queue, self.shards)
    }

    /// This core's shard if `target` is this core: work on it can borrow
    /// what [`Router::exec`] would have to copy for another core.
    pub fn here(&self, target: usize) -> Option<&Rc<Shard<D>>> {
        (target == self.me).then_some(&self.shard)
    }

    /// Runs `work` on core `target` (here, or over the mesh) and returns its
    /// result. The closure and its result are plain data; the shard it gets
    /// is that core's own.
    pub async fn exec<R, F, Fut>(&self, target: usize, work: F) -> Result<R, QueueError>
    where
        R: Send + 'static,
        F: FnOnce(Rc<Shard<D>>, Rc<ServiceStore>) -> Fut + Send + 'static,
        Fut: Future<Output = Result<R, QueueError>> + 'static,
    {
        if target == self.me {
            return work(self.shard.clone(), self.service.clone()).await;
        }
        let Some(senders) = self.senders.as_ref() else {
            return Err(QueueError::Internal {
                reason: format!("core {target} does not exist: this server has one core"),
            });
        };
        let (tx, rx) = oneshot::channel();
        // The work always runs to its end, even if the caller goes away:
        // the engine's steps (a group commit above all) must never be
        // abandoned half-way. A long poll is told to stop waiting instead
        // (ops::get_messages).
        let job: Job<D> = Box::new(move |shard, service| {
            Box::pin(async move {
                let _ = tx.send(work(shard, service).await);
            })
        });
        if senders.send_to(target, job).await.is_err() {
            return Err(QueueError::ServerBusy {
                reason: format!("core {target} is not accepting requests"),
            });
        }
        rx.await.unwrap_or_else(|_| {
            Err(QueueError::Internal {
                reason: format!("core {target} dropped a request"),
            })
        })
    }

    /// Runs work made per core on every core (List Queues' fan-out).
    pub async fn exec_all<R, F, Fut>(&self, make: impl Fn() -> F) -> Vec<Result<R, QueueError>>
    where
        R: Send + 'static,
        F: FnOnce(Rc<Shard<D>>, Rc<ServiceStore>) -> Fut + Send + 'static,
        Fut: Future<Output = Result<R, QueueError>> + 'static,
    {
        let mut out = Vec::with_capacity(self.shards);
        for i in 0..self.shards {
            out.push(self.exec(i, make()).await);
        }
        out
    }
}

/// Serves the jobs other cores send here, each as its own task, so that
/// work from other cores shares group commits with local work.
fn serve_remote<D: Disk>(mut receivers: Receivers<Job<D>>, shard: Rc<Shard<D>>, service: Rc<ServiceStore>) {
    for (_, rx) in receivers.streams() {
        let (shard, service) = (shard.clone(), service.clone());
        glommio::spawn_local(async move {
            while let Some(job) = rx.recv().await {
                glommio::spawn_local(job(shard.clone(), service.clone())).detach();
            }
        })
        .detach();
    }
}

#[cfg(test)]
mod tests {
    use super::owner;

    /// Where a queue lives must not move: the shard is the xxh3 of
    /// `account/queue` modulo the shard count, however the key is built.
    #[test]
    fn the_owner_is_the_hash_of_account_slash_queue() {
        let long = "q".repeat(200);
        // The key `acct/…` is 128 bytes (the stack buffer's size), then 129.
        let (fits, spills) = ("q".repeat(123), "q".repeat(124));
        for (account, queue) in [
            ("devstoreaccount1", "orders"),
            ("a", ""),
            ("", "q"),
            ("acct", long.as_str()),
            ("acct", fits.as_str()),
            ("acct", spills.as_str()),
        ] {
            for shards in [1usize, 2, 3, 7, 64] {
                let want = xxhash_rust::xxh3::xxh3_64(format!("{account}/{queue}").as_bytes()) % shards as u64;
                assert_eq!(
                    owner(account, queue, shards) as u64,
                    want,
                    "{account}/{queue} on {shards}"
                );
            }
        }
    }
}
