//! The braid program. (Being written.)
fn main() {
    println!("braid: not built yet");
}
