//! Threads, response chains and windows (design.md §3).
