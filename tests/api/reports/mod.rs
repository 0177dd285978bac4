//! What staff read in bulk: the overview the console opens on, the statistics of revenue and
//! members rolled up by day, and the CSV exports streamed in pages.

mod exports;
mod overview;
mod stats;
