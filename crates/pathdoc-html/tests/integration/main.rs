//! pathdoc-html's integration tests as one binary, each file a module: one link instead of one
//! per file, as ripgrep and trippy keep one integration binary per tier (ARCHITECTURE.md, "Tests").

mod hostile_numbers;
mod render;
