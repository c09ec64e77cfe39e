//! Operations: what a command does, apart from its flags and its output. Each takes validated
//! options and an open store, and returns typed findings that the command hands to `output`
//! (cargo's `ops` beside its `commands`).

pub(crate) mod clean;
pub(crate) mod clear;
pub(crate) mod doctor;
pub(crate) mod export;
pub(crate) mod import;
pub(crate) mod sandbox;
pub(crate) mod stats;

use crate::error::{Error, Result};

/// A usage error (exit 2) with this message, as a failed result.
pub(crate) fn usage<T>(message: impl Into<String>) -> Result<T> {
    Err(Error::Usage(message.into()).into())
}
