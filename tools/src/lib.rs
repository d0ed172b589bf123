//! Operator tools (the WAL tool arrives with the crash-testing issue).
