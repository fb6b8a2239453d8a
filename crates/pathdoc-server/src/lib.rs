//! pathdoc server: listener, handshake, auth, per-client limits, session registry.
