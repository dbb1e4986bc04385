//! HTTP scenarios against real `basalt` nodes (one, or three where the issue asks): every implemented endpoint with its
//! successes and documented errors. One file per API family, mirroring `src/api/`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "../common/mod.rs"]
mod common;

mod abuse;
mod acl;
mod aggregates;
mod apps;
mod auth;
mod backups;
mod batch;
mod captcha;
mod cloud_query;
mod email;
mod files;
mod files_s3;
mod functions;
mod https;
mod images;
mod installations;
mod limits;
mod multi_node;
mod objects;
mod ops;
mod push;
mod queries;
mod query_model;
mod quotas;
mod realtime;
mod roles;
mod routes;
mod schemas;
mod sdks;
mod sms;
mod timestamp;
mod users;
mod web;
