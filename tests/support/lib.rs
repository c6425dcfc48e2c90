//! Support code shared by Prescient's system tests.
#![forbid(unsafe_code)]
