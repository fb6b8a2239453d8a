//! pathdoc's versioned client/server wire protocol.
