fn main() {
    for f in api::crds() {
        println!("# {}\n{}", f.path, serde_yaml::to_string(&f.crd).unwrap());
    }
}
