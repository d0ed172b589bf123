//! Routing an operation to the core that owns its queue. Each core owns the
//! queues whose `xxh3(account/queue) % shards` is its index; a request for
//! another core's queue crosses glommio's channel mesh as a [`Command`] and
//! its [`Reply`] comes back on a oneshot channel. Commands and replies are
//! plain owned data (`Send`); the `Shard` itself never leaves its core.

use crate::service::ServiceProperties;
use engine::disk::dma::DmaDisk;
use engine::disk::Disk;
use engine::model::{Metadata, SignedIdentifier};
use engine::shard::{
    Created, PeekedMessage, PutReceipt, QueueListing, QueueProperties, ReceivedMessage, UpdateReceipt,
};
use engine::{QueueError, Shard};
use futures::channel::oneshot;
use glommio::channels::channel_mesh::{Full, MeshBuilder, Receivers, Senders};
use std::rc::Rc;

/// One queue-service operation, as sent to the owning core.
#[derive(Debug)]
pub enum Command {
    CreateQueue {
        account: String,
        queue: String,
        metadata: Metadata,
    },
    DeleteQueue {
        account: String,
        queue: String,
    },
    GetProperties {
        account: String,
        queue: String,
    },
    SetMetadata {
        account: String,
        queue: String,
        metadata: Metadata,
    },
    GetAcl {
        account: String,
        queue: String,
    },
    SetAcl {
        account: String,
        queue: String,
        acl: Vec<SignedIdentifier>,
    },
    Put {
        account: String,
        queue: String,
        text: String,
        visibility_timeout: Option<i64>,
        ttl: Option<i64>,
    },
    Get {
        account: String,
        queue: String,
        n: Option<i64>,
        visibility_timeout: Option<i64>,
    },
    Peek {
        account: String,
        queue: String,
        n: Option<i64>,
    },
    Delete {
        account: String,
        queue: String,
        id: String,
        receipt: String,
    },
    Update {
        account: String,
        queue: String,
        id: String,
        receipt: String,
        visibility_timeout: Option<i64>,
        text: Option<String>,
    },
    Clear {
        account: String,
        queue: String,
    },
    List {
        account: String,
        prefix: String,
        from: Option<String>,
        max: usize,
    },
    /// Service properties live on core 0.
    GetService {
        account: String,
    },
    /// A Set Service Properties body, merged on core 0 with the current value.
    SetService {
        account: String,
        body: Vec<u8>,
    },
}

#[derive(Debug)]
pub enum Outcome {
    Created(Created),
    Done,
    Properties(QueueProperties),
    Acl(Vec<SignedIdentifier>),
    Put(PutReceipt),
    Received(Vec<ReceivedMessage>),
    Peeked(Vec<PeekedMessage>),
    Updated(UpdateReceipt),
    Listed(Vec<QueueListing>, bool),
    Service(Box<ServiceProperties>),
}

pub type Reply = Result<Outcome, QueueError>;
type Envelope = (Command, oneshot::Sender<Reply>);

/// Which core owns `account/queue`.
pub fn owner(account: &str, queue: &str, shards: usize) -> usize {
    let mut key = Vec::with_capacity(account.len() + queue.len() + 1);
    key.extend_from_slice(account.as_bytes());
    key.push(b'/');
    key.extend_from_slice(queue.as_bytes());
    (xxhash_rust::xxh3::xxh3_64(&key) % shards as u64) as usize
}

/// Runs a command against this core's shard.
pub async fn apply<D: Disk>(shard: &Shard<D>, service: &ServiceStore, cmd: Command) -> Reply {
    use Command::*;
    Ok(match cmd {
        CreateQueue {
            account,
            queue,
            metadata,
        } => Outcome::Created(shard.create_queue(&account, &queue, metadata).await?),
        DeleteQueue { account, queue } => {
            shard.delete_queue(&account, &queue).await?;
            Outcome::Done
        }
        GetProperties { account, queue } => Outcome::Properties(shard.get_properties(&account, &queue).await?),
        SetMetadata {
            account,
            queue,
            metadata,
        } => {
            shard.set_metadata(&account, &queue, metadata).await?;
            Outcome::Done
        }
        GetAcl { account, queue } => Outcome::Acl(shard.get_acl(&account, &queue).await?),
        SetAcl { account, queue, acl } => {
            shard.set_acl(&account, &queue, acl).await?;
            Outcome::Done
        }
        Put {
            account,
            queue,
            text,
            visibility_timeout,
            ttl,
        } => Outcome::Put(
            shard
                .put_message(&account, &queue, text, visibility_timeout, ttl)
                .await?,
        ),
        Get {
            account,
            queue,
            n,
            visibility_timeout,
        } => Outcome::Received(shard.get_messages(&account, &queue, n, visibility_timeout).await?),
        Peek { account, queue, n } => Outcome::Peeked(shard.peek_messages(&account, &queue, n).await?),
        Delete {
            account,
            queue,
            id,
            receipt,
        } => {
            shard.delete_message(&account, &queue, &id, &receipt).await?;
            Outcome::Done
        }
        Update {
            account,
            queue,
            id,
            receipt,
            visibility_timeout,
            text,
        } => Outcome::Updated(
            shard
                .update_message(&account, &queue, &id, &receipt, visibility_timeout, text)
                .await?,
        ),
        Clear { account, queue } => {
            shard.clear_messages(&account, &queue).await?;
            Outcome::Done
        }
        List {
            account,
            prefix,
            from,
            max,
        } => {
            let (items, more) = shard.list_queues(&account, &prefix, from.as_deref(), max).await?;
            Outcome::Listed(items, more)
        }
        GetService { account } => Outcome::Service(Box::new(service.get(&account))),
        SetService { account, body } => {
            service.merge_and_store(&account, &body).await?;
            Outcome::Done
        }
    })
}

pub use crate::service::ServiceStore;

/// A core's view of all shards: its own, and senders to the others.
pub struct Router<D: Disk = DmaDisk> {
    pub me: usize,
    pub shards: usize,
    pub shard: Rc<Shard<D>>,
    pub service: Rc<ServiceStore>,
    senders: Option<Senders<Envelope>>,
}

pub type Mesh = MeshBuilder<Envelope, Full>;

pub fn mesh(shards: usize) -> Mesh {
    MeshBuilder::full(shards, crate::limits::MESH_CHANNEL_CAPACITY)
}

impl<D: Disk> Router<D> {
    /// Joins the mesh (when there is more than one shard) and starts serving
    /// commands that other cores send here.
    pub async fn join(
        mesh: Option<Mesh>,
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

    pub fn owner_of(&self, account: &str, queue: &str) -> usize {
        owner(account, queue, self.shards)
    }

    /// Runs `cmd` on core `target`: locally, or over the mesh.
    pub async fn exec(&self, target: usize, cmd: Command) -> Reply {
        if target == self.me {
            return apply(&self.shard, &self.service, cmd).await;
        }
        let senders = self
            .senders
            .as_ref()
            .expect("a mesh exists when there are several shards");
        let (tx, rx) = oneshot::channel();
        if senders.send_to(target, (cmd, tx)).await.is_err() {
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

    /// Runs a command built per core on every core (List Queues' fan-out).
    pub async fn exec_all(&self, make: impl Fn() -> Command) -> Vec<Reply> {
        let mut out = Vec::with_capacity(self.shards);
        for i in 0..self.shards {
            out.push(self.exec(i, make()).await);
        }
        out
    }
}

fn serve_remote<D: Disk>(mut receivers: Receivers<Envelope>, shard: Rc<Shard<D>>, service: Rc<ServiceStore>) {
    for (_, rx) in receivers.streams() {
        let (shard, service) = (shard.clone(), service.clone());
        glommio::spawn_local(async move {
            while let Some((cmd, reply)) = rx.recv().await {
                let (shard, service) = (shard.clone(), service.clone());
                // Each command runs as its own task so that commands from
                // other cores share group commits with local ones.
                glommio::spawn_local(async move {
                    let _ = reply.send(apply(&shard, &service, cmd).await);
                })
                .detach();
            }
        })
        .detach();
    }
}
