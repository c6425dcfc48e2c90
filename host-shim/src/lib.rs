//! `prescient-shim`: the host side of Prescient and the layout both sides share.
