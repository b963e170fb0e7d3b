"""A base class that an apex engine subclasses keeps working on its own: when the apex subclass's
`optimizer_step` is inherited, the step with the scaler goes into an override on the apex engine
(A2A418), never into the base class, whose own instances (the fp32 engine) have no scaler. Where no
override can be made, the module is refused (A2A126) unless the base is abstract (no instance of its
own). Runnable proof: tests/test_base_engine_alone_runnable.py."""
import pytest

from migrate import rewrite_source

SOURCE = 'import torch\nfrom apex import amp\n\n\nclass Engine:\n    def __init__(self, model, optimizer, criterion):\n        self.model, self.optimizer, self.criterion = model, optimizer, criterion\n\n    def forward_backward(self, x, y):\n        loss = self.criterion(self.model(x), y)\n        loss.backward()\n        return loss\n\n    def optimizer_step(self):\n        self.optimizer.step()\n        self.optimizer.zero_grad()\n\n\nclass ApexEngine(Engine):\n    def __init__(self, model, optimizer, criterion, opt_level="O1"):\n        super().__init__(model, optimizer, criterion)\n        self.model, self.optimizer = amp.initialize(self.model, self.optimizer, opt_level=opt_level)\n\n    def forward_backward(self, x, y):\n        loss = self.criterion(self.model(x), y)\n        with amp.scale_loss(loss, self.optimizer) as scaled_loss:\n            scaled_loss.backward()\n        return loss\n\n\nENGINES = {"fp32": Engine, "apex": ApexEngine}\n'




def _codes(res):
    return {f.code for f in res.findings}


def test_base_class_step_is_not_rewritten_when_the_base_is_used_alone():
    res = rewrite_source(SOURCE, path="engines.py")
    assert res.error is None
    base, apex = res.new_text.split("class ApexEngine")
    assert "scaler" not in base and "from apex" not in res.new_text, res.new_text
    assert "def optimizer_step(self):\n        self.scaler.step(self.optimizer)\n        self.scaler.update()" in apex
    assert "A2A418" in _codes(res) and "A2A126" not in _codes(res)
    assert rewrite_source(res.new_text, path="engines.py").new_text == res.new_text


def test_a_decorated_base_step_is_refused_not_rewritten_in_the_base():
    src = SOURCE.replace("    def optimizer_step(self):", "    @torch.no_grad()\n    def optimizer_step(self):")
    res = rewrite_source(src, path="engines.py")
    assert res.new_text == src and "A2A126" in _codes(res)
    msg = next(f.message for f in res.findings if f.code == "A2A126")
    assert "Engine.optimizer_step" in msg and "decorated" in msg


def test_a_mixin_earlier_in_the_order_is_not_shadowed():
    src = SOURCE.replace("class ApexEngine(Engine):", "class ApexEngine(Mixin, Engine):").replace(
        "\n\nclass ApexEngine", "\n\nclass Mixin:\n    def optimizer_step(self):\n        self.optimizer.step()\n"
        "\n\nclass ApexEngine")
    res = rewrite_source(src, path="engines.py")
    assert "class Engine" in res.new_text and "Engine.optimizer_step" not in res.new_text
    head = res.new_text.split("class ApexEngine")[0]
    assert "self.scaler" not in head.split("class Mixin")[0], res.new_text


def test_an_abstract_base_may_read_the_scaler():
    src = SOURCE.replace("import torch\n", "import abc\n\nimport torch\n").replace(
        "class Engine:", "class Engine(abc.ABC):").replace(
        "    def forward_backward(self, x, y):\n        loss = self.criterion(self.model(x), y)\n        loss.backward()"
        "\n        return loss\n\n    def optimizer_step(self):",
        "    @abc.abstractmethod\n    def forward_backward(self, x, y):\n        ...\n\n    @torch.no_grad()\n"
        "    def optimizer_step(self):").replace(', "fp32": Engine', "").replace('"fp32": Engine, ', "")
    res = rewrite_source(src, path="engines.py")
    assert res.error is None and "from apex" not in res.new_text, res.new_text
    assert "self.scaler.step(self.optimizer)" in res.new_text.split("class ApexEngine")[0]
