mod common;
use copilotd_model::WeightFormat;

#[test]
fn greedy_smoke() {
    let Some(mut m) = common::load(WeightFormat::Q8_0) else { return };
    println!("{:?}", m.info());
    let ids = m.tokenizer().encode("def fibonacci(n):\n").unwrap();
    println!("{ids:?}");
    let t = std::time::Instant::now();
    let mut logits = m.prefill(&ids).unwrap();
    let mut out = vec![];
    for _ in 0..40 {
        let t = common::argmax(&logits);
        out.push(t);
        logits = m.forward_tree(&[t], &[None]).unwrap();
        m.keep_path(&[0]).unwrap();
    }
    println!("{:?}\n{}", t.elapsed(), m.tokenizer().decode(&out).unwrap());
}
