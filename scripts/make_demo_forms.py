#!/usr/bin/env python3
"""Write the demo corpus's downloadable forms as minimal single-page PDFs.

Standard library only. The output is deterministic (no timestamps), so running
the script again rewrites byte-identical files. Text inside the PDFs is ASCII:
the form id, the English title and a few blank fields to fill in.

    python scripts/make_demo_forms.py [--out DIR]

DIR defaults to rag/corpus/demo/forms next to this script's repository root.
"""

from __future__ import annotations

import argparse
from pathlib import Path

ORG = "LearnHub Taiwan - Digital Learning Promotion Centre (fictional demo)"
CONTACT = "service@learnhub.example.gov.tw  |  02-2000-0000  |  Mon-Fri 08:30-17:30"

# (file name, form id, English title, fields)
FORMS = [
    (
        "hours-correction-request.pdf",
        "F-101",
        "Learning Hours Correction Request",
        [
            "Name",
            "Account ID (national ID number)",
            "Agency",
            "Phone / email",
            "Course code(s) and title(s) (max 10)",
            "Completion or attendance date",
            "Reason",
            "Evidence attached",
            "Agency personnel office signature / stamp",
        ],
    ),
    (
        "certificate-reissue-request.pdf",
        "F-102",
        "Certificate Reissue Request",
        [
            "Name (new name if changed)",
            "Account ID",
            "Phone / email",
            "Verification code(s) of certificates (max 20)",
            "Reason: [ ] incorrect details  [ ] name change",
            "Correct details",
            "Documents attached",
            "Signature and date",
        ],
    ),
    (
        "account-data-change-request.pdf",
        "F-103",
        "Account Data Change Request",
        [
            "Name",
            "Account ID (national ID number or email)",
            "Phone",
            "Change: [ ] email [ ] name [ ] identity type [ ] merge [ ] 2FA reset [ ] unlock",
            "Before",
            "After",
            "Account to merge (if any)",
            "Copy of ID card attached [ ]",
            "Signature and date",
        ],
    ),
    (
        "personal-data-access-request.pdf",
        "F-104",
        "Personal Data Access Request",
        [
            "Name",
            "Account ID",
            "Phone / email",
            "Postal address",
            "Request: [ ] inquire [ ] review [ ] copy [ ] correct [ ] stop use [ ] delete",
            "Scope of data",
            "Representative (if any)",
            "Copy of ID card attached [ ]",
            "Signature and date",
        ],
    ),
    (
        "accessibility-support-request.pdf",
        "F-105",
        "Accessibility Support Request",
        [
            "Name",
            "Account ID",
            "Phone / email",
            "Service: [ ] extra quiz time [ ] alternative format [ ] sign language",
            "         [ ] live captioning [ ] venue support [ ] other",
            "Details of need",
            "Scope: [ ] all courses  [ ] course code(s) and dates",
            "Supporting documents (optional)",
            "Signature and date",
        ],
    ),
]


def _escape(text: str) -> str:
    """Escape a string for a PDF literal string (ASCII only)."""
    text.encode("ascii")  # raises on non-ASCII: keep PDF text to the base font
    return text.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")


def _content_stream(form_id: str, title: str, fields: list[str]) -> bytes:
    lines: list[str] = ["BT"]

    def text(font: str, size: int, x: int, y: int, s: str) -> None:
        lines.append(f"/{font} {size} Tf 1 0 0 1 {x} {y} Tm ({_escape(s)}) Tj")

    text("F1", 9, 56, 800, ORG)
    text("F2", 18, 56, 764, f"{form_id}  {title}")
    text("F1", 10, 56, 744, "Submit: Online service > Upload a form, by email, or by post")
    y = 704
    for field in fields:
        text("F1", 11, 56, y, f"{field}:")
        y -= 40
    text("F1", 8, 56, 60, CONTACT)
    text("F1", 8, 56, 48, "Demo form for a fictional organisation. Not an official document.")
    lines.append("ET")
    # Underlines for each field.
    y = 704 - 14
    for _ in fields:
        lines.append(f"0.5 w 56 {y} m 539 {y} l S")
        y -= 40
    return ("\n".join(lines) + "\n").encode("ascii")


def build_pdf(form_id: str, title: str, fields: list[str]) -> bytes:
    content = _content_stream(form_id, title, fields)
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [3 0 R] /Count 1 >>",
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 595 842] "
        b"/Resources << /Font << /F1 4 0 R /F2 5 0 R >> >> /Contents 6 0 R >>",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica /Encoding /WinAnsiEncoding >>",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica-Bold /Encoding /WinAnsiEncoding >>",
        b"<< /Length %d >>\nstream\n" % len(content) + content + b"endstream",
        (
            "<< /Title ({}) /Subject ({}) /Author ({}) /Producer (make_demo_forms.py) >>".format(
                _escape(f"{form_id} {title}"), _escape(title), _escape(ORG)
            )
        ).encode("ascii"),
    ]
    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n" % number + body + b"\nendobj\n"
    xref_at = len(out)
    out += b"xref\n0 %d\n" % (len(objects) + 1)
    out += b"0000000000 65535 f \n"
    for offset in offsets:
        out += b"%010d 00000 n \n" % offset
    out += b"trailer\n<< /Size %d /Root 1 0 R /Info %d 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        len(objects),
        xref_at,
    )
    return bytes(out)


def main() -> None:
    default_out = Path(__file__).resolve().parents[1] / "rag" / "corpus" / "demo" / "forms"
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=default_out, help="output folder")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    for filename, form_id, title, fields in FORMS:
        path = args.out / filename
        path.write_bytes(build_pdf(form_id, title, fields))
        print(f"{form_id}  {path}")


if __name__ == "__main__":
    main()
