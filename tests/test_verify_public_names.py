"""The README's ``from jaxconv.verify import check_options`` keeps working: it is check_context's."""

from jaxconv import check_context


def test_check_options_is_importable_from_verify_as_the_readme_shows():
    from jaxconv.verify import check_options

    assert check_options is check_context.check_options
    with check_options(strict=True, sizes=(1, 3)):
        assert check_context.current_options().strict is True
        assert tuple(check_context.current_options().sizes) == (1, 3)
    assert check_context.current_options().strict is False
