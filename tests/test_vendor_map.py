"""The rule behind each family's VENDOR map: whatever can be promoted can be vendored."""

from __future__ import annotations

import pytest

from tests.ladderfab import vendor as tool
from tests.ladderfab import vl

FAMILIES = sorted(p.parent.name for p in (vl.TOOL_ROOT / "ladder" / "kernels").glob("*/family.py"))


@pytest.mark.parametrize("name", FAMILIES)
def test_the_winner_is_in_the_vendor_map(name):
    """The family's winner at HEAD (its best promotable record) is what `make vendor` takes,
    so its modules must be in VENDOR["modules"]; every entry there names an idea folder and
    modules that exist."""
    from ladder.records import NoWinner, winner

    repo = vl.TOOL_ROOT
    spec = vl.load_family_spec(repo, "HEAD", name)
    folders = vl.idea_folders(repo, "HEAD", spec)
    for folder, mapping in spec.modules.items():
        assert folder in folders, f"VENDOR['modules'] maps {folder}, which is not an idea"
        for stem in mapping:
            assert (repo / spec.ideas_dir / folder / f"{stem}.py").is_file(), (folder, stem)
        assert "kernel" in mapping, f"{folder}: its kernel.py must be mapped"
    code_sha_of, cases_of = vl.idea_lookups(repo, "HEAD", spec)
    try:
        won = winner(
            name, repo, device=spec.target_device, code_sha_of=code_sha_of, cases_of=cases_of
        )
    except NoWinner:
        return  # nothing can be promoted yet: nothing the map must hold
    assert won.idea in spec.modules, (
        f"the winner {won.idea} is not in VENDOR['modules'] of {spec.family_dir}/family.py"
    )


def test_the_vendor_refuses_an_idea_without_the_cases_the_family_promotes():
    """cconv promotes only ideas with every case (PROMOTE_CASES); idea 001 takes the dense
    case alone, so neither --idea nor --record may vendor it, and the refusal says why."""
    repo = vl.TOOL_ROOT
    spec = vl.load_family_spec(repo, "HEAD", "cconv")
    with pytest.raises(vl.VendorError, match=r"001-strip-onepass lacks case\(s\) bias-residual"):
        tool._check_promoted_cases(repo, spec, "HEAD", "001-strip-onepass")
    tool._check_promoted_cases(repo, spec, "HEAD", "003-strip-merge")  # every case: accepted


def test_vendor_idea_refusals_on_the_real_repository_say_why():
    """`--idea` of an idea the winner rule turns down quotes the rule's reason: 001 lacks cases
    (checked before anything else), 004's records time too few of the rank shapes, and
    000-fla is the baseline."""
    repo = vl.TOOL_ROOT
    spec = vl.load_family_spec(repo, "HEAD", "cconv")
    sha = vl.resolve_commit(repo, "HEAD")
    with pytest.raises(vl.VendorError, match=r"001-strip-onepass lacks case\(s\)"):
        tool.select_record(repo, spec, sha, "001-strip-onepass", None)
    with pytest.raises(vl.VendorError, match="one record must time every rank shape") as info:
        tool.select_record(repo, spec, sha, "004-exact-sigmoid", None)
    assert "the winner rule, over every cconv record, says" in str(info.value)
    assert "<idea>" not in str(info.value)
    # 015's passed records are all on an H100, cconv's target is the H200: the refusal says so
    # and names the bench to run, not the winner rule over every record
    assert spec.target_device == "H200"
    with pytest.raises(vl.VendorError, match="none on the family's target device 'H200'") as info:
        tool.select_record(repo, spec, sha, "015-pipelined-loops", None)
    assert "H100 80GB HBM3" in str(info.value) and "make bench FAMILY=cconv IDEA=015" in str(
        info.value
    )
    with pytest.raises(vl.VendorError, match="no single idea '²'"):
        vl.resolve_idea_ref(repo, sha, spec, "²")
    # a record of the baseline is refused as the baseline's, whatever --idea says
    base = sorted((repo / spec.ideas_dir / "000-fla" / "records").glob("*.json"))[0].stem
    with pytest.raises(vl.VendorError, match="000-fla is family cconv's baseline"):
        tool.select_record(repo, spec, sha, "013-small-split", base)
    with pytest.raises(vl.VendorError, match="is in no idea's records/ at"):
        tool.select_record(repo, spec, sha, None, "20990101T000000Z-abcdef")
    with pytest.raises(vl.VendorError, match="baseline .* it is never vendored"):
        tool.select_record(repo, spec, sha, "000-fla", None)
