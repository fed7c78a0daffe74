use super::*;

#[test]
fn non_null_passes_a_pointer_through_and_names_the_call_of_a_null() {
    let mut x = 7u32;
    let p: *mut u32 = &mut x;
    let got = non_null(p, "ibv_alloc_pd", || -> String {
        panic!("the object is named only on failure")
    })
    .unwrap();
    assert_eq!(got.as_ptr(), p);
    let err = non_null(std::ptr::null_mut::<u32>(), "ibv_alloc_pd", || "rxe0").unwrap_err();
    match err {
        VerbsError::Call { op, object, .. } => {
            assert_eq!((op, object.as_str()), ("ibv_alloc_pd", "rxe0"))
        }
        other => panic!("{other:?}"),
    }
}
