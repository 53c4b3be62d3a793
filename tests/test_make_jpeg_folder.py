"""benchmarks/make_jpeg_folder.py: the layout trainers read, the same bytes for the same seed,
files of ImageNet's size at the default settings."""

from __future__ import annotations

from pathlib import Path

from benchmark_scripts import benchmark_module

maker = benchmark_module("make_jpeg_folder")


def files(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*.JPEG"))}


def test_layout_is_imagenet_style(jpeg_folder):
    found = files(jpeg_folder)
    assert len(found) == 2 * 8 + 2 * 2
    assert "train/n00000001/n00000001_7.JPEG" in found and "val/n00000000/n00000000_1.JPEG" in found
    assert all(data[:2] == b"\xff\xd8" for data in found.values())  # JPEG start-of-image


def test_the_same_seed_writes_the_same_bytes(jpeg_folder, tmp_path):
    again, other = tmp_path / "again", tmp_path / "other"
    assert maker.make_folder(again, 2, 8, 2, size=(64, 48))[0] == 20
    maker.make_folder(other, 2, 8, 2, size=(64, 48), seed=1)
    assert files(again) == files(jpeg_folder)
    assert files(other).keys() == files(jpeg_folder).keys() != {}
    assert all(files(other)[k] != v for k, v in files(jpeg_folder).items())


def test_default_images_are_the_size_of_imagenet_files(tmp_path):
    from PIL import Image

    n, total = maker.make_folder(tmp_path, 1, 3, 0)
    assert n == 3 and 80_000 < total / n < 150_000  # ImageNet's training JPEGs: ~110 KB
    with Image.open(next(tmp_path.rglob("*.JPEG"))) as im:
        assert im.size == (500, 375) and im.mode == "RGB"


def test_bad_arguments_are_usage_errors(tmp_path, capsys):
    import pytest

    for argv in (["--size", "500by375"], ["--quality", "100"], ["--classes", "0"]):
        with pytest.raises(SystemExit) as stop:
            maker.main([str(tmp_path / "x"), *argv])
        assert stop.value.code == 2
    assert "'500by375' is not WIDTHxHEIGHT" in capsys.readouterr().err
