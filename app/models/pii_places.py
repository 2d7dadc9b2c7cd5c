"""PII rules for where someone is: street addresses, ZIP codes, countries and states.

Pure regex / arithmetic, no model and no I/O (see app/models/pii_rules.py).
"""

from __future__ import annotations

import re

from app.models.pii_proposals import (
    EntityProposal,
    text_before,
    words_re,
    wordset,
)

# --------------------------------------------------------------------------- street addresses

_CORE_SUFFIX = (
    r"Streets?|St|Avenues?|Ave|Av|Roads?|Rd|Boulevards?|Blvd|Lanes?|Ln|Drives?|Dr|Courts?|Ct|Places?|Pl|"
    r"Terraces?|Ter|Ways?|Parkways?|Pkwy|Circles?|Cir|Highway|Hwy|Squares?|Sq|Trails?|Trl|Crescent|Cres|"
    r"Close|Alley|Aly|Plaza|Plz|Expressway|Expy|Freeway|Fwy|Turnpike|Tpke|Route|Rte"
)
# The rest of the USPS street-suffix list (Publication 28, singular or plural). Only after a
# capitalised name, and scored lower than the core list: "10 Bonus Points" is rare but possible.
_MORE_SUFFIX = "|".join(
    f"{w}s?"
    for w in sorted(
        wordset(
            "Row Loop Path Pike Walk Mews Grove Garden Gdns Hill Height Hts Crossing Crossroad Xing Point Pt "
            "Ridge Park Pass Passage Glen Green Cove Common Creek View Vista Estate Ranch Run Landing Meadow "
            "Harbor Harbour Hollow Junction Knoll Manor Mill Orchard Pine Port Shore Spring Station Summit "
            "Valley Village Well Wood Branch Bridge Brook Burg Bypass Camp Canyon Cape Causeway Center Centre "
            "Cliff Club Corner Course Crest Curve Dale Dam Divide Extension Fall Ferry Field Flat Ford Forest "
            "Forge Fork Fort Gateway Haven Inlet Island Isle Key Lake Light Loaf Lock Lodge Mall Mission "
            "Motorway Mount Mountain Neck Oval Overpass Plain Prairie Radial Ramp Rapid Rest River Shoal "
            "Skyway Spur Stream Stravenue Throughway Trace Track Trafficway Tunnel Underpass Union Viaduct "
            "Ville Wall"
        )
    )
)
_NUMBER = r"\d{1,6}[A-Za-z]?(?:-\d{1,5}[A-Za-z]?)?"
_CAP_WORD = r"(?:[A-Z][\w'’.-]*|\d{1,3}(?:st|nd|rd|th))"
_DIRECTION = r"(?:N|S|E|W|NE|NW|SE|SW|North|South|East|West|N\.|S\.|E\.|W\.|N\.E\.|N\.W\.|S\.E\.|S\.W\.)"
_UNIT = (
    r"(?:,?[ \t]*(?i:apt\.?|apartment|suite|ste\.?|unit|fl\.?|floor|room|rm\.?|bldg\.?|building|dept\.?|"
    r"#)[ \t]*#?[ \t]*[A-Za-z]?\d[\w-]{0,5})"
)
_STREET_HEAD = r"(?<![\w#.,$€£-])" + _NUMBER + r"[ \t]+(?:" + _CAP_WORD + r"[ \t]+){1,4}?"
_STREET_TAIL = r")\b\.?(?:[ \t]+" + _DIRECTION + r"(?!\w))?" + _UNIT + r"?"
_US_STREET = re.compile(_STREET_HEAD + r"(?:" + _CORE_SUFFIX + _STREET_TAIL)
_US_STREET_MORE = re.compile(_STREET_HEAD + r"(?:" + _MORE_SUFFIX + _STREET_TAIL)
_STOP = r"(?:the|a|an|of|on|in|to|up|down|into|from|and|or|my|our|your|his|her|their|at|for|by|with|more)"
# Typed in lower case, common in chat: "i live at 123 main st apt 4". Core suffixes only, two name words
# at most, and below the default threshold unless an address cue precedes ("1 decimal place").
_US_STREET_LOWER = re.compile(
    r"(?<![\w#.,$€£-])" + _NUMBER + r"[ \t]+(?:(?!" + _STOP + r"\b)[a-z][a-z'’-]+[ \t]+){1,2}(?:street|st|"
    r"avenue|ave|road|rd|boulevard|blvd|lane|ln|drive|dr|court|ct|place|pl|terrace|way|parkway|pkwy)\b\.?"
    r"(?:[ \t]+(?:n|s|e|w|ne|nw|se|sw)\b)?" + _UNIT + r"?"
)
# "Jakobstrasse 89", "Olmstraat 69", "Kaarikatu 32", "ul. Zamkowa 33"
_EU_STREET = re.compile(
    r"\b(?:ul\.\s+)?[A-ZÀ-ÖØ-Þ][\w'’-]{2,}?(?:strasse|straße|str\.|weg|gasse|allee|platz|damm|straat|laan|"
    r"gracht|plein|kade|vej|gade|gatan|vägen|väg|veien|vegen|gata|katu|tie|kuja|utca|ulica|cesta|"
    r"steig)[ \t]+\d{1,5}[a-zA-Z]?\b"
)
# "Avenida Noruega 42", "Rue de la Paix 5", "Via Roma 10"
_ROMANCE_STREET = re.compile(
    r"\b(?:Avenida|Avda\.|Av\.|Calle|C/|Carrer|Rua|Travessa|Largo|Via|Viale|Piazza|Corso|Paseo|Plaza|Rue|"
    r"Chemin|Quai|Impasse|Allée)[ \t]+(?:(?:de|del|la|le|les|du|des|da|do|dos|das|di|della|d'|l')[ \t]*)*"
    r"[A-ZÀ-Ö][\w'’.-]*(?:[ \t]+[A-ZÀ-Ö][\w'’.-]*){0,3},?[ \t]+\d{1,5}[a-zA-Z]?\b"
)
# "82 rue Beauvau", "12 avenue des Champs-Élysées"
_FRENCH_STREET = re.compile(
    r"(?<![\w.-])\d{1,5}(?:[ \t]?(?:bis|ter))?,?[ \t]+(?:rue|avenue|av\.|boulevard|bd|place|chemin|allée|"
    r"impasse|quai|route|cours)[ \t]+(?:(?:de|du|des|la|le|les|d'|l')[ \t]*)*[A-ZÀ-Ö][\w'’-]*"
    r"(?:[ \t]+[A-ZÀ-Ö][\w'’-]*){0,3}"
)
_PO_BOX = re.compile(
    r"\b(?:P\.?\s?O\.?\s?Box|Post(?:al)?\s+Office\s+Box|Postbox|Postboks|Postfach|Apartado)\s+\d{1,6}\b",
    re.IGNORECASE,
)
# Right after an explicit address cue, suffix-less forms count too: "lives at Na Kopci 278",
# "my address is 14 Kungsgatan".
_ADDRESS_CUE = re.compile(
    r"\b(?:address(?:\s+is)?|live[sd]?\s+(?:at|on)|living\s+at|located\s+at|moved\s+to|"
    r"sen[dt]\s+(?:it\s+|them\s+|this\s+)?to|ship(?:ped)?\s+(?:it\s+)?to|deliver(?:ed)?\s+(?:it\s+)?to|"
    r"meet\s+(?:me|you|us)\s+at|taxi\s+to|return(?:ed)?\s+(?:it\s+)?to)\s*[:,-]?\s*",
    re.IGNORECASE,
)
_CUED_STREET = re.compile(
    r"\d{1,6}[A-Za-z]?[ \t]+[A-ZÀ-Þ][\w'’.-]+(?:[ \t]+[A-ZÀ-Þ][\w'’.-]*){0,3}(?:[ \t]+\d{1,5}[a-zA-Z]?\b)?"
    r"|[A-ZÀ-Þ][\w'’.-]+(?:[ \t]+[A-ZÀ-Þa-z][\w'’.-]*){0,3}?[ \t]+\d{1,5}[a-zA-Z]?\b"
)
# A unit on its own line or after a comma ("...\n Apt. 296\n ...", ", Suite 500")
_UNIT_LINE = re.compile(
    r"(?:^|(?<=[\n,]))[ \t>]*((?:Apt\.?|Apartment|Suite|Ste\.?)[ \t]*#?[ \t]*\d{1,5}[A-Za-z]?)\b",
    re.MULTILINE,
)
# "the corner of 5th Avenue and Main Street", "intersection of Elm St and Oak Ave"
_STREET_NAME = r"(?:\d{1,3}(?:st|nd|rd|th)|[A-Z][\w'’.-]*)(?:[ \t]+[A-Z][\w'’.-]*){0,3}"
_CORNER = re.compile(
    r"\b(?i:corner|intersection|junction)\s+of\s+(" + _STREET_NAME + r"\s+(?:and|&)\s+" + _STREET_NAME + r")"
)
_ADDRESS_CONTEXT = words_re(
    ("address", "live", "lives", "living", "located", "moved", "ship", "deliver", "at")
)


# "Chapter 3 Green Light", "Season 2 Park Avenue": the number belongs to the word before it.
_NOT_STREET_LEAD = re.compile(
    r"\b(?:chapter|ch|section|sec|page|p|pp|part|step|level|season|episode|ep|volume|vol|book|figure|fig|"
    r"table|grade|class|gate|platform|track|bus|flight|exit|version|verse|act|scene|top|item|"
    r"question|problem|exercise|lesson|unit|rule|article|paragraph|line|row|column|size|day|week|year)"
    r"\.?\s*$",
    re.IGNORECASE,
)
# After an article the number is a year or a count naming a thing ("the 1996 World Food Summit",
# "a 5 Star Resort"), unless an address cue comes first ("my address is the 14 Maple Drive one").
# No "a." here: a lettered list ("a. 10 Main Street") is a list of addresses.
_ARTICLE_LEAD = re.compile(r"\b(?:the|an?)\s+$", re.IGNORECASE)
_STRONG_ADDRESS_CUE = words_re(("address", "live", "lives", "living", "located", "moved", "ship", "deliver"))


def _not_a_street_lead(text: str, start: int) -> bool:
    before = text_before(text, start, 16)
    if _NOT_STREET_LEAD.search(before):
        return True
    return bool(_ARTICLE_LEAD.search(before)) and not _STRONG_ADDRESS_CUE.search(text_before(text, start, 32))


def find_street_addresses(text: str) -> list[EntityProposal]:
    """Street line plus unit ("221B Baker Street", "123 Main St, Apt 4"). City, state and ZIP are
    left to GPE / ZIP_CODE, matching the reference router's separate types."""
    out = []
    for rx, score in (
        (_US_STREET, 0.8),
        (_US_STREET_MORE, 0.6),
        (_US_STREET_LOWER, 0.45),
        (_EU_STREET, 0.75),
        (_ROMANCE_STREET, 0.75),
        (_FRENCH_STREET, 0.75),
        (_PO_BOX, 0.8),
    ):
        for m in rx.finditer(text):
            if m.group()[0].isdigit() and _not_a_street_lead(text, m.start()):
                continue
            s = score
            if _ADDRESS_CONTEXT.search(text_before(text, m.start(), 32)):
                s = min(s + 0.15, 0.95)
            out.append(EntityProposal("STREET_ADDRESS", m.start(), m.end(), s, "rule:street_address"))
    for m in _UNIT_LINE.finditer(text):
        out.append(EntityProposal("STREET_ADDRESS", m.start(1), m.end(1), 0.6, "rule:unit"))
    for m in _CORNER.finditer(text):
        end = m.end(1)
        if text[end - 1] == "." and len(m.group(1).split()[-1]) > 4:  # sentence stop, not "St."
            end -= 1
        out.append(EntityProposal("STREET_ADDRESS", m.start(1), end, 0.7, "rule:corner"))
    for cue in _ADDRESS_CUE.finditer(text):
        cued = _CUED_STREET.match(text, cue.end())
        if cued:
            out.append(EntityProposal("STREET_ADDRESS", cued.start(), cued.end(), 0.65, "rule:cued_street"))
    return out


# --------------------------------------------------------------------------- ZIP codes

_STATE_ABBR = sorted(
    wordset(
        "AL AK AZ AR CA CO CT DE DC FL GA HI ID IL IN IA KS KY LA ME MD MA MI MN MS MO MT NE NV NH NJ NM NY "
        "NC ND OH OK OR PA RI SC SD TN TX UT VT VA WA WV WI WY PR GU VI AS MP"
    )
)
_STATE_NAMES = (
    "Alabama|Alaska|Arizona|Arkansas|California|Colorado|Connecticut|Delaware|Florida|Georgia|Hawaii|"
    "Idaho|Illinois|Indiana|Iowa|Kansas|Kentucky|Louisiana|Maine|Maryland|Massachusetts|Michigan|"
    "Minnesota|Mississippi|Missouri|Montana|Nebraska|Nevada|New Hampshire|New Jersey|New Mexico|"
    "New York|North Carolina|North Dakota|Ohio|Oklahoma|Oregon|Pennsylvania|Rhode Island|"
    "South Carolina|South Dakota|Tennessee|Texas|Utah|Vermont|Virginia|Washington|West Virginia|"
    "Wisconsin|Wyoming|Puerto Rico|District of Columbia"
)
# "Washington, DC 20500", "Austin, Texas 78701", "Springfield IL 62701". Abbreviations that are
# also words/labels (ID, IN, OR, ME, OK, HI, AS) need the comma/newline so "user ID 12345" stays out.
_ZIP_AFTER_STATE = re.compile(
    r"(?:(?:,|\n)[ \t]*(?:" + "|".join(_STATE_ABBR) + r"|" + _STATE_NAMES + r")\.?|"
    r"\b[A-Z][a-z]+[ \t]+(?:"
    + "|".join(a for a in _STATE_ABBR if a not in {"ID", "IN", "OR", "ME", "OK", "HI", "AS"})
    + r")|\b(?:"
    + _STATE_NAMES
    + r"))[\s,]+(\d{5}(?:-\d{4})?)(?![\w-])"
)
# With an explicit label any common postal layout counts: US, UK, Canada, NL, "533 41", "5000-047".
_ZIP_LABELLED = re.compile(
    r"\b(?:zip|zipcode|zip\s+code|postal\s+code|post\s*code|postcode|plz)\b(?:\s*(?:is|was|number|no\.?|#))?"
    r"\s*[:#=-]?\s*("
    r"\d{5}(?:-\d{4})?|[A-Z]{1,2}\d[A-Z\d]?\s?\d[A-Z]{2}|[A-Z]\d[A-Z]\s?\d[A-Z]\d|\d{4}\s?[A-Z]{2}|"
    r"\d{3}\s\d{2}|\d{4}-\d{3}|\d{2}-\d{3}|\d{3,4}"
    r")(?![\w-])",
    re.IGNORECASE,
)


def find_zip_codes(text: str) -> list[EntityProposal]:
    """A 5-digit number is a ZIP only after a state or a zip/postal label."""
    out = []
    for m in _ZIP_AFTER_STATE.finditer(text):
        out.append(EntityProposal("ZIP_CODE", m.start(1), m.end(1), 0.85, "rule:zip_state"))
    for m in _ZIP_LABELLED.finditer(text):
        out.append(EntityProposal("ZIP_CODE", m.start(1), m.end(1), 0.9, "rule:zip_label"))
    return out


_COUNTRIES = (
    "Afghanistan|Albania|Algeria|Andorra|Angola|Antigua and Barbuda|Argentina|Armenia|Australia|Austria|"
    "Azerbaijan|Bahamas|Bahrain|Bangladesh|Barbados|Belarus|Belgium|Belize|Benin|Bhutan|Bolivia|"
    "Bosnia and Herzegovina|Botswana|Brazil|Brunei|Bulgaria|Burkina Faso|Burundi|Cabo Verde|Cape Verde|"
    "Cambodia|Cameroon|Canada|Central African Republic|Chad|Chile|China|Colombia|Comoros|Congo|Costa Rica|"
    "Croatia|Cuba|Cyprus|Czech Republic|Czechia|Denmark|Djibouti|Dominica|Dominican Republic|Ecuador|Egypt|"
    "El Salvador|Equatorial Guinea|Eritrea|Estonia|Eswatini|Ethiopia|Fiji|Finland|France|Gabon|Gambia|"
    "Georgia|Germany|Ghana|Greece|Greenland|Grenada|Guatemala|Guinea|Guinea-Bissau|Guyana|Haiti|Honduras|"
    "Hong Kong|Hungary|Iceland|India|Indonesia|Iran|Iraq|Ireland|Israel|Italy|Ivory Coast|Jamaica|Japan|"
    "Jordan|Kazakhstan|Kenya|Kiribati|Kosovo|Kuwait|Kyrgyzstan|Laos|Latvia|Lebanon|Lesotho|Liberia|Libya|"
    "Liechtenstein|Lithuania|Luxembourg|Madagascar|Malawi|Malaysia|Maldives|Mali|Malta|Marshall Islands|"
    "Mauritania|Mauritius|Mexico|Micronesia|Moldova|Monaco|Mongolia|Montenegro|Morocco|Mozambique|Myanmar|"
    "Namibia|Nauru|Nepal|Netherlands|New Zealand|Nicaragua|Niger|Nigeria|North Korea|North Macedonia|"
    "Norway|Oman|Pakistan|Palau|Palestine|Panama|Papua New Guinea|Paraguay|Peru|Philippines|Poland|"
    "Portugal|Puerto Rico|Qatar|Romania|Russia|Rwanda|Saint Kitts and Nevis|Saint Lucia|Samoa|San Marino|"
    "Saudi Arabia|Senegal|Serbia|Seychelles|Sierra Leone|Singapore|Slovakia|Slovenia|Solomon Islands|"
    "Somalia|South Africa|South Korea|South Sudan|Spain|Sri Lanka|Sudan|Suriname|Sweden|Switzerland|Syria|"
    "Taiwan|Tajikistan|Tanzania|Thailand|Timor-Leste|Togo|Tonga|Trinidad and Tobago|Tunisia|Turkey|"
    "Türkiye|Turkmenistan|Tuvalu|Uganda|Ukraine|United Arab Emirates|United Kingdom|"
    "United States of America|United States|Uruguay|Uzbekistan|Vanuatu|Vatican City|Venezuela|Vietnam|"
    "Yemen|Zambia|Zimbabwe|England|Scotland|Wales|Northern Ireland|USA|UAE"
)
# Countries and US states, capitalised as names. spaCy's small model often tags them ORG or
# PERSON out of context ("We moved here from Cyprus"), or misses them in lists and addresses.
_PLACES = re.compile(r"(?<![\w-])(?:" + _COUNTRIES + r"|" + _STATE_NAMES + r")(?![\w-])")


def find_places(text: str) -> list[EntityProposal]:
    return [
        EntityProposal("GPE", m.start(), m.end(), 0.85, "gazetteer:place") for m in _PLACES.finditer(text)
    ]
