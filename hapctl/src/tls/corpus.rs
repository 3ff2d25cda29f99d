//! placeholder until the corpus lands.
