//! The Hematite HTTP server: thread-per-core HTTP/1.1 on glommio, Azure
//! auth, and routing of each request to the shard that owns its queue.
//!
//! Nothing is here yet: the server is built in its own issue, on top of
//! `hematite-engine`.
