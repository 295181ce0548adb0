//! RDMA over verbs: the provider seam ([`provider`]) and the providers behind it.

#![allow(dead_code)] // The transport over this seam lands in steps.

pub(crate) mod fabric;
pub(crate) mod ffi;
pub(crate) mod ibv;
pub(crate) mod link;
pub(crate) mod provider;
pub(crate) mod select;
pub(crate) mod soft;
pub(crate) mod transport;
