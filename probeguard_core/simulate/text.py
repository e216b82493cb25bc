"""Clinical-sounding text for the simulator: question stems, options, rationales, queries, doc ids.

The text is a stand-in for real completions; it carries exactly the structure the paper's
rationale signal reads (§3.2, Appendix C):

* *reasoning* sentences never contain a conclusion cue of Appendix C (answer, option, choice,
  correct, therefore, thus, hence, most likely, best), so the claim-extraction rule sees only
  the concluding sentences;
* *concluding* sentences contain a cue and cite one **mechanism** phrase, a (process,
  structure) pair such as "impaired clearance of the distal tubule".  A vote resting on
  knowledge cites the question's one mechanism (with paraphrase variation); a vote resting
  on a shared misconception cites a reason drawn from a pool of distinct ones.

The NLI stand-in (:func:`mechanisms_in`) recognizes a mechanism by both its words occurring
in a claim, whatever the paraphrase around them.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from probeguard_core.simulate.draws import Draws, draws_of

#: a Generator, or its :class:`~probeguard_core.simulate.draws.Draws` (the same stream, cheaper scalar draws)
Rng = np.random.Generator | Draws

#: Appendix C's conclusion cues (case-insensitive substrings).
CUES = ("answer", "option", "choice", "correct", "therefore", "thus", "hence", "most likely", "best")

SPECIALTY_TERMS: dict[str, dict[str, list[str]]] = {
    "Cardiology": {
        "finding": ["exertional chest pressure", "a new systolic murmur", "syncope on exertion", "bilateral ankle edema", "an irregularly irregular pulse"],
        "dx": ["aortic stenosis", "hypertrophic cardiomyopathy", "atrial fibrillation", "constrictive pericarditis", "stable angina", "mitral regurgitation", "dilated cardiomyopathy", "infective endocarditis", "pericardial tamponade", "ventricular septal rupture"],
    },
    "Hematology": {
        "finding": ["fatigue and pallor", "easy bruising", "splenomegaly", "a low reticulocyte count", "microcytic indices"],
        "dx": ["iron deficiency anemia", "beta thalassemia trait", "hereditary spherocytosis", "immune thrombocytopenia", "vitamin B12 deficiency", "sickle cell disease", "aplastic anemia", "G6PD deficiency", "polycythemia vera", "von Willebrand disease"],
    },
    "Obstetrics and gynecology": {
        "finding": ["vaginal bleeding at 30 weeks", "pelvic pain", "an elevated blood pressure in pregnancy", "amenorrhea", "a tender adnexal mass"],
        "dx": ["placenta previa", "placental abruption", "preeclampsia", "ectopic pregnancy", "polycystic ovary syndrome", "endometriosis", "ovarian torsion", "uterine leiomyoma", "HELLP syndrome", "gestational diabetes"],
    },
    "Gastroenterology": {
        "finding": ["epigastric pain", "bloody diarrhea", "jaundice", "dysphagia to solids", "postprandial fullness"],
        "dx": ["peptic ulcer disease", "ulcerative colitis", "Crohn disease", "achalasia", "primary biliary cholangitis", "acute pancreatitis", "celiac disease", "choledocholithiasis", "Barrett esophagus", "ischemic colitis"],
    },
    "Pediatrics": {
        "finding": ["failure to thrive", "a barking cough", "projectile vomiting", "a high fever for five days", "delayed milestones"],
        "dx": ["pyloric stenosis", "croup", "Kawasaki disease", "cystic fibrosis", "intussusception", "bronchiolitis", "Hirschsprung disease", "Duchenne dystrophy", "measles", "neonatal jaundice"],
    },
    "Psychiatry": {
        "finding": ["persistent low mood", "auditory hallucinations", "episodes of elevated mood", "intrusive thoughts", "sudden panic episodes"],
        "dx": ["major depressive disorder", "schizophrenia", "bipolar I disorder", "obsessive-compulsive disorder", "panic disorder", "generalized anxiety disorder", "delirium", "borderline personality disorder", "anorexia nervosa", "adjustment disorder"],
    },
    "Nephrology": {
        "finding": ["periorbital edema", "rising creatinine", "hematuria", "hyperkalemia", "polyuria"],
        "dx": ["minimal change disease", "IgA nephropathy", "acute tubular necrosis", "membranous nephropathy", "renal artery stenosis", "nephrogenic diabetes insipidus", "post-streptococcal glomerulonephritis", "polycystic kidney disease", "renal tubular acidosis", "interstitial nephritis"],
    },
    "Emergency medicine": {
        "finding": ["hypotension after trauma", "altered mental status", "sudden dyspnea", "a rigid abdomen", "tachycardia and diaphoresis"],
        "dx": ["tension pneumothorax", "septic shock", "pulmonary embolism", "ruptured abdominal aortic aneurysm", "diabetic ketoacidosis", "anaphylaxis", "carbon monoxide poisoning", "cardiac tamponade", "salicylate toxicity", "hypovolemic shock"],
    },
    "Infectious diseases": {
        "finding": ["fever and purulent cough", "a painless genital ulcer", "night sweats", "a spreading rash", "neck stiffness"],
        "dx": ["Streptococcus pneumoniae pneumonia", "Staphylococcus aureus pneumonia", "primary syphilis", "tuberculosis", "Lyme disease", "bacterial meningitis", "infectious mononucleosis", "Legionella pneumonia", "herpes zoster", "malaria"],
    },
    "Endocrinology": {
        "finding": ["weight loss and tremor", "polyuria and polydipsia", "a neck mass", "hypercalcemia", "proximal muscle weakness"],
        "dx": ["Graves disease", "type 1 diabetes mellitus", "primary hyperparathyroidism", "Cushing syndrome", "Addison disease", "hypothyroidism", "pheochromocytoma", "SIADH", "papillary thyroid carcinoma", "acromegaly"],
    },
    "Neurology": {
        "finding": ["sudden unilateral weakness", "a resting tremor", "episodic vertigo", "progressive memory loss", "ascending paralysis"],
        "dx": ["ischemic stroke", "Parkinson disease", "multiple sclerosis", "Guillain-Barre syndrome", "myasthenia gravis", "Alzheimer disease", "migraine with aura", "subarachnoid hemorrhage", "amyotrophic lateral sclerosis", "Meniere disease"],
    },
}
#: Extra specialties for labelled questions outside Table 8 (Appendix I omits those under 25 unanimous).
EXTRA_SPECIALTY_TERMS = {
    "Pulmonology": {"finding": ["chronic cough", "clubbing", "wheezing"], "dx": ["asthma", "COPD", "sarcoidosis", "idiopathic pulmonary fibrosis", "bronchiectasis", "lung adenocarcinoma", "pleural effusion", "pneumoconiosis", "alpha-1 antitrypsin deficiency", "cor pulmonale"]},
    "Rheumatology": {"finding": ["symmetric joint pain", "a malar rash", "morning stiffness"], "dx": ["rheumatoid arthritis", "systemic lupus erythematosus", "gout", "ankylosing spondylitis", "polymyalgia rheumatica", "systemic sclerosis", "Sjogren syndrome", "reactive arthritis", "pseudogout", "dermatomyositis"]},
    "Dermatology": {"finding": ["a pruritic rash", "a changing mole", "blistering lesions"], "dx": ["psoriasis", "melanoma", "bullous pemphigoid", "pemphigus vulgaris", "atopic dermatitis", "basal cell carcinoma", "erythema multiforme", "tinea corporis", "seborrheic keratosis", "contact dermatitis"]},
    "Pharmacology": {"finding": ["a new drug started last week", "an adverse reaction", "a drug interaction"], "dx": ["warfarin", "lithium", "amiodarone", "metformin", "isoniazid", "digoxin", "vancomycin", "clozapine", "methotrexate", "propranolol"]},
}
ALL_TERMS = {**SPECIALTY_TERMS, **EXTRA_SPECIALTY_TERMS}
GENERIC_TERMS = {
    "finding": ["fatigue", "fever", "weight loss", "abdominal pain", "shortness of breath", "headache", "joint pain", "a rash"],
    "dx": sorted({d for v in ALL_TERMS.values() for d in v["dx"]}),
}

PROCESSES = [
    "impaired clearance", "autoantibody binding", "reduced perfusion", "enzyme deficiency", "toxin-mediated injury",
    "granulomatous inflammation", "receptor downregulation", "outflow obstruction", "volume overload", "immune complex deposition",
    "abnormal conduction", "defective transport", "loss of inhibition", "ectopic secretion", "bacterial adherence",
    "mucosal barrier failure", "hypertrophic remodeling", "osmotic imbalance", "demyelinating damage", "vascular leakage",
    "hormone resistance", "clonal proliferation", "ischemic necrosis", "feedback suppression", "structural rupture",
    "fibrotic scarring", "cytokine release", "impaired synthesis", "pressure transmission", "electrolyte shifting",
]
STRUCTURES = [
    "distal tubule", "glomerular basement membrane", "left ventricle", "mitral valve", "bone marrow",
    "hepatic sinusoids", "biliary tree", "gastric mucosa", "small bowel villi", "adrenal cortex",
    "thyroid follicles", "pituitary stalk", "basal ganglia", "motor end plate", "peripheral myelin",
    "alveolar wall", "bronchial smooth muscle", "pleural space", "coronary circulation", "aortic root",
    "placental bed", "ovarian stroma", "synovial lining", "dermal capillaries", "lymph nodes",
    "splenic red pulp", "red cell membrane", "platelet surface", "mucous membranes", "cerebral cortex",
]

_REASONING = [
    "The {age}-year-old patient's {finding} points to {system} involvement.",
    "The history of {finding} narrows the differential considerably.",
    "Laboratory values here are consistent with {finding}.",
    "We should weigh the timeline of {finding} against the exam findings.",
    "The presentation with {finding} is typical for this age group.",
    "Imaging and labs help separate {dx1} from {dx2}.",
    "Key features to compare are the onset and the distribution of {finding}.",
    "{dx1} would usually show a different pattern than what is described.",
    "The vital signs add little beyond the {finding}.",
    "Considering {dx1} first, the exam does not fit well.",
]
_SYSTEMS = ["renal", "cardiac", "hepatic", "neurologic", "hematologic", "endocrine", "pulmonary", "immune", "gastrointestinal", "vascular"]

# Concluding templates; {mech} is a surface form of the mechanism, {X} the letter, {dx} the option text.
_CONCLUDE_KNOWLEDGE = [
    "Therefore, the answer is {X} because of {mech}.",
    "The correct choice is {X}, explained by {mech}.",
    "Hence {X} ({dx}) fits, reflecting {mech}.",
    "The underlying mechanism is {mech}, so the best option is {X}.",
    "Thus {dx} is most likely, driven by {mech}.",
]
_CONCLUDE_OTHER = [
    "Therefore, I choose {X}, given {mech}.",
    "{dx} seems most likely here in view of {mech}.",
    "The answer should be {X}, since {mech} would account for it.",
    "Option {X} is favored because of {mech}.",
    "Thus {X} looks right on account of {mech}.",
]
_FINAL_LINE = ["Therefore, the answer is {X}.", "So the correct option is {X}.", "Final choice: {X}."]

_PROBE_OPEN = [
    "The challenge documents discuss {mech}.",
    "The retrieved evidence raises {mech} as an alternative explanation.",
    "The new documents emphasize {mech}.",
]
_PROBE_KEEP = ["Having weighed the challenge, the answer remains {X} because of {mech}.", "The evidence does not overturn {X}; {mech} still applies, so it is the best choice."]
_PROBE_SWITCH = ["On reflection the correct choice is {X}, given {mech}.", "The evidence favors {X}, so I revise my answer in view of {mech}."]

TEXTBOOKS = ["Harrison", "Robbins", "Guyton", "Katzung", "Williams", "Nelson", "Bates", "Goldman", "Schwartz", "Janeway"]


def has_cue(sentence: str) -> bool:
    """Whether a sentence contains one of Appendix C's conclusion cues (case-insensitive substring)."""
    low = sentence.lower()
    return any(c in low for c in CUES)


def mechanism_phrase(mech: tuple[int, int], variant: int) -> str:
    """A surface form of mechanism ``(process, structure)``; paraphrases keep both key words."""
    p, s = PROCESSES[mech[0]], STRUCTURES[mech[1]]
    return (f"{p} in the {s}", f"{p} of the {s}", f"the {s} showing {p}")[variant % 3]


def citations(texts: Sequence[str], registry: Sequence[tuple[int, int]]) -> np.ndarray:
    """``(len(texts), len(registry))`` booleans: text i cites mechanism j (both its key words
    present, whatever the paraphrase): the NLI stand-in's reading."""
    words = [(PROCESSES[p], STRUCTURES[s]) for p, s in registry]
    return np.array([[p in t and s in t for p, s in words] for t in texts], dtype=bool).reshape(len(texts), len(words))


def mechanisms_in(text: str, registry: Sequence[tuple[int, int]]) -> frozenset[tuple[int, int]]:
    """The mechanisms of ``registry`` cited in ``text`` (:func:`citations`)."""
    return frozenset(m for m, hit in zip(registry, citations([text], registry)[0]) if hit)


def terms(specialty: str | None) -> dict[str, list[str]]:
    return ALL_TERMS.get(specialty or "", GENERIC_TERMS)


def question_text(rng: Rng, specialty: str | None, dataset: str) -> tuple[str, list[str]]:
    """A short vignette and the findings it mentions."""
    dr = draws_of(rng)
    t = terms(specialty)
    f = [t["finding"][i] for i in dr.sample(len(t["finding"]), 2)]
    age = dr.between(18, 80) if specialty != "Pediatrics" else dr.between(1, 14)
    sex = ("man", "woman")[dr.below(2)] if specialty != "Pediatrics" else ("boy", "girl")[dr.below(2)]
    tail = ("Which of the following is the most likely diagnosis?", "Which of the following is the most likely underlying cause?",
            "Which of the following best explains these findings?")[dr.below(3)]
    return f"A {age}-year-old {sex} presents with {f[0]} and {f[1]}. {tail}", f + [str(age)]


def option_texts(rng: Rng, specialty: str | None, n_options: int) -> list[str]:
    pool = terms(specialty)["dx"]
    if len(pool) < n_options:
        pool = GENERIC_TERMS["dx"]
    return [pool[i] for i in draws_of(rng).sample(len(pool), n_options)]


def rationale(
    rng: Rng,
    *,
    letter: str,
    dx: str,
    mech: tuple[int, int],
    knowledge: bool,
    n_sentences: int,
    findings: Sequence[str],
    distractors: Sequence[str],
) -> str:
    """A rationale of ``n_sentences`` sentences (2-6) ending with ``<answer>letter</answer>``.

    The last one or two sentences conclude (contain a cue) and cite ``mech``; the rest reason
    without any cue.  ``knowledge`` selects the concluding templates of a knowledge-backed vote.
    """
    dr = draws_of(rng)
    n_sentences = int(min(6, max(2, n_sentences)))
    n_conclude = 2 if (n_sentences >= 4 and dr.uniform() < 0.4) else 1
    body = []
    for k in dr.sample(len(_REASONING), n_sentences - n_conclude):
        body.append(_REASONING[k].format(
            age=findings[-1], finding=findings[dr.below(len(findings) - 1)], system=_SYSTEMS[dr.below(len(_SYSTEMS))],
            dx1=distractors[0], dx2=distractors[-1]))
    templates = _CONCLUDE_KNOWLEDGE if knowledge else _CONCLUDE_OTHER
    concl = templates[dr.below(len(templates))].format(X=letter, dx=dx, mech=mechanism_phrase(mech, dr.below(3)))
    concl = concl[0].upper() + concl[1:]
    body.append(concl)
    if n_conclude == 2:
        body.append(_FINAL_LINE[dr.below(len(_FINAL_LINE))].format(X=letter))
    return " ".join(body) + f" <answer>{letter}</answer>"


def probe_rationale(rng: Rng, *, letter: str, kept: bool, mech: tuple[int, int], challenge: tuple[int, int]) -> str:
    """A short re-answer under challenge (Algorithm 1, line 4): opener on the challenge, one concluding sentence."""
    dr = draws_of(rng)
    opener = _PROBE_OPEN[dr.below(len(_PROBE_OPEN))].format(mech=mechanism_phrase(challenge, dr.below(3)))
    pool = _PROBE_KEEP if kept else _PROBE_SWITCH
    concl = pool[dr.below(len(pool))].format(X=letter, mech=mechanism_phrase(mech, dr.below(3)))
    return f"{opener} {concl} <answer>{letter}</answer>"


def doc_id(rng: Rng) -> str:
    """An id in a simulated MedCorp-like id space (PubMed, StatPearls, textbooks, Wikipedia)."""
    dr = draws_of(rng)
    k = dr.uniform()
    if k < 0.55:
        return f"pubmed_{dr.between(10_000_000, 39_999_999)}"
    if k < 0.75:
        return f"statpearls_{dr.between(1, 9999)}_{dr.below(40)}"
    if k < 0.92:
        return f"textbook_{TEXTBOOKS[dr.below(len(TEXTBOOKS))]}_{dr.between(1, 4000)}"
    return f"wiki_{dr.between(1, 6_000_000)}"


def queries(rng: Rng, findings: Sequence[str], options: Sequence[str], k: int, counter: str | None = None) -> list[str]:
    """``k`` retrieval queries about the dispute (substrate) or against ``counter`` (probe, Appendix A)."""
    dr = draws_of(rng)
    out = []
    for j in range(k):
        a = options[dr.below(len(options))]
        f = findings[dr.below(len(findings) - 1)]
        if counter is None:
            out.append(f"{a} versus alternatives in a patient with {f}")
        else:
            out.append((f"Evidence against {counter} in {f}", f"{a} presenting with {f}: distinguishing features",
                        f"Alternatives to {counter} when {f} is present")[j % 3])
    return out
