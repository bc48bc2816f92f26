mod common;
use copilotd_model::{LoadOptions, Model, WeightFormat};

fn cpu_ms() -> f64 {
    let s = std::fs::read_to_string("/proc/thread-self/stat").unwrap();
    let rest = &s[s.rfind(')').unwrap() + 2..];
    let f: Vec<&str> = rest.split(' ').collect();
    let (u, st): (f64, f64) = (f[11].parse().unwrap(), f[12].parse().unwrap());
    (u + st) * 10.0
}

#[test]
#[ignore]
fn scratch() {
    let path = common::model_path().unwrap();
    let mut m = Model::load(&path, &LoadOptions { threads: Some(1), weights: WeightFormat::Q8_0 }).unwrap();
    let src = common::python_source("argparse.py");
    let ids = m.tokenizer().encode(&src).unwrap();
    let c = cpu_ms();
    m.prefill(&ids[..512]).unwrap();
    println!("prefill 512: cpu {:.0} ms", cpu_ms() - c);
    let ks: Vec<usize> =
        std::env::var("KS").map(|s| s.split(',').map(|x| x.parse().unwrap()).collect()).unwrap_or(vec![1, 8, 16]);
    for k in ks {
        let parents: Vec<_> = (0..k).map(|i| i.checked_sub(1)).collect();
        m.forward_tree(&ids[100..100 + k], &parents).unwrap();
        let c = cpu_ms();
        let reps = std::env::var("REPS").map(|s| s.parse().unwrap()).unwrap_or(200 / k.max(4));
        for _ in 0..reps {
            m.forward_tree(&ids[100..100 + k], &parents).unwrap();
        }
        println!("t({k}) cpu {:.1} ms", (cpu_ms() - c) / reps as f64);
    }
}
